/**
 * Token-bucket rate limiting: `rate` tokens per second, burst of one second's worth.
 * Global (one bucket) or per client address (a bounded map of buckets, idle ones evicted first).
 */

const MAX_CLIENT_BUCKETS = 10_000;

class Bucket {
  tokens: number;
  last: number;
  constructor(capacity: number, now: number) {
    this.tokens = capacity;
    this.last = now;
  }
  take(rate: number, now: number): boolean {
    this.tokens = Math.min(rate, this.tokens + ((now - this.last) / 1000) * rate);
    this.last = now;
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return true;
    }
    return false;
  }
}

export class RateLimiter {
  readonly #global: Bucket;
  readonly #clients = new Map<string, Bucket>();
  /** Requests refused since creation (for tests and debug vars). */
  refused = 0;

  constructor(
    readonly rate: number,
    readonly perClient: boolean,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.#global = new Bucket(rate, now());
  }

  /** Takes one token for `client`; false means the request must be refused with 429. */
  allow(client: string): boolean {
    const now = this.now();
    let bucket = this.#global;
    if (this.perClient) {
      let b = this.#clients.get(client);
      if (b) {
        this.#clients.delete(client); // re-insert: Map order is recency order
      } else {
        b = new Bucket(this.rate, now);
        if (this.#clients.size >= MAX_CLIENT_BUCKETS) this.#clients.delete(this.#clients.keys().next().value!);
      }
      this.#clients.set(client, b);
      bucket = b;
    }
    const ok = bucket.take(this.rate, now);
    if (!ok) this.refused++;
    return ok;
  }
}
