/** A per-second cap: at most `perSecond` takes in each one-second window; refusals are counted. */
const WINDOW_MS = 1000;

export class PerSecondBudget {
  #windowStart = -Infinity;
  #used = 0;
  /** Takes refused since creation. */
  refused = 0;

  constructor(
    public perSecond: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Whether take(t) would succeed now, without taking. */
  hasRoom(t = this.now()): boolean {
    return t - this.#windowStart >= WINDOW_MS || this.#used < this.perSecond;
  }

  /** True when one more item fits in the current window (`t`: the clock's time now, when the caller has it). */
  take(t = this.now()): boolean {
    if (t - this.#windowStart >= WINDOW_MS) {
      this.#windowStart = t;
      this.#used = 0;
    }
    if (this.#used >= this.perSecond) {
      this.refused++;
      return false;
    }
    this.#used++;
    return true;
  }
}
