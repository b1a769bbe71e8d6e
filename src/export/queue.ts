/** The first link of the chain: a bounded FIFO of encoded items of one signal, limited in items and in encoded bytes, and the link that fills it. */
import { queuedBytes, type EncodedItem } from "./encode";
import type { Sender } from "./sender";

/** Compact the backing array once this many taken slots lie before the head. */
const COMPACT_AFTER_ITEMS = 4096;

/** `disk_full`: only from a PersistentQueue whose log could not be written. */
export type OfferResult = "ok" | "queue_full" | "mem_limit" | "disk_full";

export class SignalQueue {
  #items: EncodedItem[] = [];
  #head = 0;
  #bytes = 0;

  /** Limits; may be changed at any time (a reload): they apply to the next offers. */
  constructor(
    public capacity: number,
    public memLimitBytes: number,
  ) {}

  /** Items queued now. */
  get size(): number {
    return this.#items.length - this.#head;
  }

  /** Encoded bytes queued now. */
  get bytes(): number {
    return this.#bytes;
  }

  /** Appends an item, or says why it does not fit (nothing changes then). */
  offer(item: EncodedItem): OfferResult {
    if (this.size >= this.capacity) return "queue_full";
    const n = queuedBytes(item);
    if (this.#bytes + n > this.memLimitBytes) return "mem_limit";
    this.#items.push(item);
    this.#bytes += n;
    return "ok";
  }

  /** Removes and returns up to `n` items from the head. */
  take(n: number): EncodedItem[] {
    const end = Math.min(this.#items.length, this.#head + n);
    const out = this.#items.slice(this.#head, end);
    this.#head = end;
    for (const e of out) this.#bytes -= queuedBytes(e);
    if (this.#head === this.#items.length) {
      this.#items = [];
      this.#head = 0;
    } else if (this.#head >= COMPACT_AFTER_ITEMS && this.#head * 2 >= this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return out;
  }
}

/** Items for the queue link; `undefined` stands for an item that could not be encoded. */
export interface QueueRequest {
  items: Iterable<EncodedItem | undefined>;
  /**
   * `false` (submit): every item is offered; what does not fit is refused and counted by reason, and after a
   * `disk_full` the rest is refused too (what was accepted is a prefix). `true` (offer): only the longest prefix
   * that fits is taken; it stops at the first refusal, except an item too large for mem_limit alone (it never
   * fits: refused and taken).
   */
  prefix: boolean;
}

/** What the queue link did with a request. */
export interface Queued {
  accepted: number;
  /** Items dealt with: accepted, refused or not encodable (`prefix`: the prefix taken; else every item). */
  taken: number;
  /** Items that could not be encoded. */
  invalid: number;
  queue_full: number;
  mem_limit: number;
  disk_full: number;
}

/**
 * The first link of the chain: puts items into the signal's queue (in memory or persistent) and wakes the
 * batch link. It answers at once with what it took, so producers learn synchronously what was accepted.
 */
export class QueueSender implements Sender<QueueRequest, Queued> {
  readonly queue: SignalQueue;
  readonly #next: Sender<void, void>;

  constructor(queue: SignalQueue, next: Sender<void, void>) {
    this.queue = queue;
    this.#next = next;
  }

  send(r: QueueRequest): Queued {
    const out: Queued = { accepted: 0, taken: 0, invalid: 0, queue_full: 0, mem_limit: 0, disk_full: 0 };
    for (const item of r.items) {
      if (!item) {
        out.invalid++;
        out.taken++;
        continue;
      }
      // After a disk_full the rest of the call is refused too, so that what was accepted is a prefix.
      const result = !r.prefix && out.disk_full ? "disk_full" : this.queue.offer(item);
      if (result === "ok") out.accepted++;
      else if (!r.prefix) out[result]++;
      else if (result === "mem_limit" && queuedBytes(item) > this.queue.memLimitBytes) out.mem_limit++;
      else break;
      out.taken++;
    }
    this.#next.send();
    return out;
  }
}
