/**
 * Bun's fake timers (`jest.useFakeTimers()` in bun:test): the runtime has `jest.advanceTimersByTime`, which the
 * bun-types version of the lockfile does not declare yet.
 */
import { jest } from "bun:test";

const timers = jest as typeof jest & { advanceTimersByTime(ms: number): void };

/** Runs the fake timers due in the next `ms` milliseconds. */
export function advanceTimersByTime(ms: number): void {
  timers.advanceTimersByTime(ms);
}

/** Lets pending promise continuations run (timers stay where they are): a few turns of the microtask queue. */
export async function flushPromises(turns = 10): Promise<void> {
  for (let i = 0; i < turns; i++) await Promise.resolve();
}
