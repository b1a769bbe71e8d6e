/**
 * Bun's fake timers (`jest.useFakeTimers()` in bun:test): the runtime has `jest.advanceTimersByTime` and
 * `jest.getTimerCount`, which the bun-types version of the lockfile does not declare yet.
 */
import { jest } from "bun:test";

const timers = jest as typeof jest & { advanceTimersByTime(ms: number): void; getTimerCount(): number };

/** Runs the fake timers due in the next `ms` milliseconds. */
export function advanceTimersByTime(ms: number): void {
  timers.advanceTimersByTime(ms);
}

/** How many fake timers are pending (timeouts and intervals; setImmediate stays real and is not counted). */
export function timerCount(): number {
  return timers.getTimerCount();
}

/** Lets pending promise continuations run (timers stay where they are): a few turns of the microtask queue. */
export async function flushPromises(turns = 10): Promise<void> {
  for (let i = 0; i < turns; i++) await Promise.resolve();
}

/** A turn of the event loop: setImmediate callbacks (which bun's fake timers leave real) and I/O run. */
export function nextTurn(): Promise<void> {
  return new Promise<void>((resolve) => setImmediate(resolve));
}

/**
 * Under fake timers: moves the clock `stepMs` at a time (a function: read at each step), with a turn of the event
 * loop after each step, until `cond` holds; throws naming `what` when `maxSteps` steps did not bring it.
 */
export async function advanceUntil(cond: () => boolean, what: string, stepMs: number | (() => number), maxSteps = 10_000): Promise<void> {
  for (let i = 0; !cond(); i++) {
    if (i === maxSteps) throw new Error(`${what}: not reached in ${maxSteps} steps of the fake clock`);
    advanceTimersByTime(typeof stepMs === "number" ? stepMs : stepMs());
    await nextTurn();
  }
}
