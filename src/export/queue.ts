/** The first link of the chain: a bounded FIFO of encoded items of one signal, limited in items and in encoded bytes. */
import { queuedBytes, type EncodedItem } from "./encode";

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
