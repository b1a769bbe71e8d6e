/**
 * Closes read from one ring buffer (a connection's CLOSED record, a process's exit) for state that records of another
 * ring feed (http_events, tls_events): each is applied `graceMs` after it was read, and only once the records it
 * follows were handled, that is once a record of that other ring written after it was handled (`lastNs`, set by the
 * caller for every record) or that ring had nothing left (`caughtUp`). Records are read in the order they were
 * reserved, so one written after the close comes after every record of the closed connection. At most `max` wait:
 * past that the oldest is applied at once.
 */
export class DeferredCloses {
  #queue: Array<{ key: string; atMs: number; ns: bigint }> = [];
  /** Kernel time of the last record of the other ring handled. */
  lastNs = 0n;

  constructor(
    private readonly apply: (key: string, closedNs: bigint) => void,
    private readonly graceMs: number,
    private readonly max: number,
  ) {}

  /** A close of `key` at kernel time `ns`, read now (`nowMs`). */
  add(key: string, ns: bigint, nowMs: number): void {
    this.#queue.push({ key, atMs: nowMs, ns });
    if (this.#queue.length > this.max) {
      const oldest = this.#queue.shift()!;
      this.apply(oldest.key, oldest.ns);
    }
  }

  /** Applies the closes whose grace has passed and whose records were handled (`caughtUp`: the other ring is empty). */
  applyDue(nowMs: number, caughtUp: () => boolean): void {
    const q = this.#queue;
    const cutoff = nowMs - this.graceMs;
    let empty: boolean | undefined;
    let n = 0;
    while (n < q.length && q[n]!.atMs <= cutoff && (this.lastNs > q[n]!.ns || (empty ??= caughtUp()))) {
      const c = q[n++]!;
      this.apply(c.key, c.ns);
    }
    if (n > 0) this.#queue = q.slice(n);
  }

  /** Forgets every close waiting. */
  clear(): void {
    this.#queue = [];
  }
}
