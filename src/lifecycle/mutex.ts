/** An async mutual-exclusion lock that records how long callers waited (read by the mutex debug profile). */
export class Mutex {
  #tail: Promise<void> = Promise.resolve();
  #held = false;
  /** Callers inside run() (holding or waiting). */
  #entered = 0;
  /** Total milliseconds callers waited for the lock, and how many waits there were. */
  waitedMs = 0;
  contentions = 0;

  constructor(readonly name: string) {}

  get held(): boolean {
    return this.#held;
  }

  /** Runs `fn` with the lock held; callers queue in arrival order. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    const previous = this.#tail;
    let release!: () => void;
    this.#tail = new Promise<void>((r) => (release = r));
    const waitStart = performance.now();
    if (this.#entered > 0) this.contentions++;
    this.#entered++;
    await previous;
    this.waitedMs += performance.now() - waitStart;
    this.#held = true;
    try {
      return await fn();
    } finally {
      this.#held = false;
      this.#entered--;
      release();
    }
  }
}
