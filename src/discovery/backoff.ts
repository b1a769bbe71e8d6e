/** Exponential backoff with jitter between reconnection attempts, and a sleep that a shutdown cuts short. */

export class Backoff {
  #next: number;

  constructor(
    readonly initialMs: number,
    public maxMs: number,
  ) {
    this.#next = initialMs;
  }

  /** The delay to wait now (with up to 20% jitter); doubles the following one up to maxMs. */
  nextDelayMs(): number {
    const d = Math.min(this.#next, this.maxMs);
    this.#next = Math.min(this.#next * 2, this.maxMs);
    return Math.round(d * (0.8 + Math.random() * 0.2));
  }

  /** Starts again from initialMs (after a success). */
  reset(): void {
    this.#next = this.initialMs;
  }
}

/** Resolves after `ms`, or as soon as `signal` aborts (never rejects). */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

/** The message of an unknown thrown value. */
export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
