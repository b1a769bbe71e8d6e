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

/**
 * The timers that code in `source` (a path, e.g. "/src/ebpf/pump.ts") creates through the global timer functions
 * and has not cleared (a timeout also once it ran), from this call until `restore()`. Not the runtime's
 * `jest.getTimerCount()`: that counts every fake timer of the process, and bun test runs every file in one process;
 * a real timer another file left (a gRPC subchannel's reconnect backoff after its channel closed, the GC monitor's
 * interval) that comes due while fake timers are on is armed again as a fake timer, or makes one.
 */
export function timersOf(source: string): { count(): number; restore(): void } {
  const g = globalThis as unknown as Record<"setTimeout" | "setInterval" | "clearTimeout" | "clearInterval", (...a: unknown[]) => unknown>;
  const original = { setTimeout: g.setTimeout, setInterval: g.setInterval, clearTimeout: g.clearTimeout, clearInterval: g.clearInterval };
  const live = new Set<unknown>();
  const fromSource = () => (new Error().stack ?? "").includes(source);
  g.setInterval = (fn: unknown, ...rest: unknown[]) => {
    const t = original.setInterval(fn, ...rest);
    if (fromSource()) live.add(t);
    return t;
  };
  g.setTimeout = (fn: unknown, ...rest: unknown[]) => {
    if (!fromSource() || typeof fn !== "function") return original.setTimeout(fn, ...rest);
    const t = original.setTimeout((...args: unknown[]) => {
      live.delete(t);
      return (fn as (...a: unknown[]) => unknown)(...args);
    }, ...rest);
    live.add(t);
    return t;
  };
  g.clearInterval = (t: unknown) => {
    live.delete(t);
    return original.clearInterval(t);
  };
  g.clearTimeout = (t: unknown) => {
    live.delete(t);
    return original.clearTimeout(t);
  };
  return {
    count: () => live.size,
    restore: () => void Object.assign(g, original),
  };
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
