/**
 * Drains one ring (or perf) buffer reader on the event loop without blocking it: a timer polls the reader;
 * a batch is bounded (MAX_RECORDS_PER_BATCH) and, when it fills, the next batch runs at once (setImmediate)
 * so other work interleaves. The poll interval follows the buffer size so that at the producer rate this
 * machine reaches the ring is never more than a quarter full between polls. The pump ends when closed.
 */
import type { ReaderBinding } from "./loader";

export const MAX_RECORDS_PER_BATCH = 16_384;
/**
 * Producer rate the poll interval is sized for: a getppid storm into a ring nobody waits on reaches ~3.3M
 * records/s of 72 bytes here (bench/ringbuf.ts), ~240 MB/s.
 */
const PEAK_PRODUCER_BYTES_PER_MS = 250_000;
const MIN_POLL_INTERVAL_MS = 1;
const MAX_POLL_INTERVAL_MS = 10;

export function pollIntervalMs(sizeBytes: number): number {
  const quarterFillMs = sizeBytes / 4 / PEAK_PRODUCER_BYTES_PER_MS;
  return Math.max(MIN_POLL_INTERVAL_MS, Math.min(MAX_POLL_INTERVAL_MS, Math.floor(quarterFillMs)));
}

export interface PumpCounters {
  /** Records decoded and handed on. */
  received: number;
  /** Records that did not decode (too short). */
  decodeErrors: number;
}

export class RecordPump<E> {
  readonly counters: PumpCounters = { received: 0, decodeErrors: 0 };
  readonly intervalMs: number;
  /** Called after each batch with the records read (for the events metric; once per batch, not per record). */
  onBatch: ((count: number) => void) | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #immediate: ReturnType<typeof setImmediate> | undefined;
  #closed = false;
  readonly #onRecord: (view: DataView, offset: number, length: number) => void;

  constructor(
    readonly binding: ReaderBinding<E>,
    onEvent: (event: E) => void,
    readonly onError: (error: Error) => void,
  ) {
    this.intervalMs = pollIntervalMs(binding.sizeBytes);
    const decode = binding.decode;
    const counters = this.counters;
    this.#onRecord = (view, offset, length) => {
      let event: E;
      try {
        event = decode(view, offset, length);
      } catch {
        counters.decodeErrors++;
        return;
      }
      counters.received++;
      onEvent(event);
    };
  }

  start(): void {
    if (this.#closed || this.#timer || this.#immediate) return;
    this.#schedule(false);
  }

  /** Reads what is available now (also used for a last drain before close). Returns records read. */
  drain(): number {
    if (this.#closed) return 0;
    const before = this.counters.received;
    const n = this.binding.reader.consume(this.#onRecord, MAX_RECORDS_PER_BATCH);
    this.onBatch?.(this.counters.received - before);
    return n;
  }

  #schedule(more: boolean): void {
    if (this.#closed) return;
    if (more) this.#immediate = setImmediate(() => this.#tick());
    else this.#timer = setTimeout(() => this.#tick(), this.intervalMs);
  }

  #tick(): void {
    this.#timer = undefined;
    this.#immediate = undefined;
    let n = 0;
    try {
      n = this.drain();
    } catch (e) {
      this.onError(e as Error);
    }
    this.#schedule(n >= MAX_RECORDS_PER_BATCH);
  }

  /** Stops polling. Idempotent; the reader itself is closed by its set. */
  close(): void {
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#immediate) clearImmediate(this.#immediate);
    this.#timer = undefined;
    this.#immediate = undefined;
  }
}
