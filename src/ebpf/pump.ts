/**
 * Drains one ring (or perf) buffer reader on the event loop without blocking it. A timer polls the reader; a
 * turn reads at most one batch, handing each record straight to the set's decoder and event handler
 * (RecordReader.consumeDecoded: no closure, try or counter update per record; counters move once per batch).
 * Batches are bounded by time: a batch holds as many records as the previous turns' cost per record fits in
 * TURN_BUDGET_MS (between MIN_ and MAX_RECORDS_PER_BATCH), and when a turn fills its batch the next one runs at
 * once (setImmediate) so other work interleaves. The poll interval follows the buffer size, so that at the
 * producer rate this machine reaches a ring is at most a third full between polls, and adapts: it halves while
 * polls find the ring more than a quarter full and grows back while they find it nearly empty. Each wakeup of
 * the event loop costs Bun ~75 µs of CPU here (bench/ringbuf.ts), so polling no more often than needed matters.
 * The pump ends when closed.
 */
import type { ReaderBinding } from "./loader";

/** Upper bound of a batch (records per turn). */
export const MAX_RECORDS_PER_BATCH = 65_536;
/** Lower bound of a batch, however slow the decoder. */
export const MIN_RECORDS_PER_BATCH = 1_024;
/** Batch size before any turn was timed. */
const FIRST_BATCH_RECORDS = 16_384;
/** Time a turn aims at (the longest the pump holds the event loop, give or take one record). */
export const TURN_BUDGET_MS = 2;
/** A turn timed only when it handed at least this many records (shorter ones say little about the cost). */
const MIN_TIMED_RECORDS = 256;
/**
 * Producer rate the poll interval is sized for: a getppid storm into a ring nobody waits on reaches ~3.3M
 * records/s of 72 bytes here (bench/ringbuf.ts), ~240 MB/s.
 */
const PEAK_PRODUCER_BYTES_PER_MS = 250_000;
/** Share of the ring the peak producer may fill between two polls. */
const SAFE_FILL_FRACTION = 1 / 3;
/** A poll finding more than this share of the ring pending halves the interval. */
const BUSY_FILL_FRACTION = 1 / 4;
/** A poll finding less than this share pending lets the interval grow back (doubling) to its base. */
const IDLE_FILL_FRACTION = 1 / 16;
const MIN_POLL_INTERVAL_MS = 1;
const MAX_POLL_INTERVAL_MS = 25;

/** Base poll interval for a buffer of `sizeBytes`: the time the peak producer takes to fill a third of it. */
export function pollIntervalMs(sizeBytes: number): number {
  const fillMs = (sizeBytes * SAFE_FILL_FRACTION) / PEAK_PRODUCER_BYTES_PER_MS;
  return Math.max(MIN_POLL_INTERVAL_MS, Math.min(MAX_POLL_INTERVAL_MS, Math.floor(fillMs)));
}

/** Records a batch may hold so that a turn costing `nsPerRecord` per record stays within TURN_BUDGET_MS. */
export function batchRecords(nsPerRecord: number): number {
  if (!(nsPerRecord > 0)) return MAX_RECORDS_PER_BATCH;
  const fit = Math.floor((TURN_BUDGET_MS * 1e6) / nsPerRecord);
  return Math.max(MIN_RECORDS_PER_BATCH, Math.min(MAX_RECORDS_PER_BATCH, fit));
}

/** Next poll interval from the current one and the share of the ring found pending at this poll. */
export function nextPollIntervalMs(currentMs: number, baseMs: number, pendingFraction: number): number {
  if (pendingFraction > BUSY_FILL_FRACTION) return Math.max(MIN_POLL_INTERVAL_MS, Math.floor(currentMs / 2));
  if (pendingFraction < IDLE_FILL_FRACTION) return Math.min(baseMs, currentMs * 2);
  return currentMs;
}

export interface PumpCounters {
  /** Records decoded and handed on. */
  received: number;
  /** Records that did not decode (the decoder threw a RangeError: too short, unknown kind). */
  decodeErrors: number;
  /** Records whose decoder or event handler threw something else (the first per turn goes to onError). */
  handlerErrors: number;
  /** Turns taken (timer polls and immediate follow-ups). */
  turns: number;
  /** Longest turn, in milliseconds: the most the pump held the event loop at once. */
  longestTurnMs: number;
}

export class RecordPump<E> {
  readonly counters: PumpCounters = { received: 0, decodeErrors: 0, handlerErrors: 0, turns: 0, longestTurnMs: 0 };
  /** Base poll interval (the ring's size at the peak producer rate). */
  readonly intervalMs: number;
  /** Called after each batch with the records read (for the events metric; once per batch, not per record). */
  onBatch: ((count: number) => void) | undefined;
  /** Called after each timed turn with its wall time and the records it handed out (bench/ringbuf.ts's turn percentiles). */
  onTurn: ((ms: number, records: number) => void) | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #immediate: ReturnType<typeof setImmediate> | undefined;
  #closed = false;
  #currentIntervalMs: number;
  #batchRecords = FIRST_BATCH_RECORDS;
  #failedInBatch = 0;
  #handlerErrorReported = false;
  readonly #onEvent: (event: E) => void;
  readonly #onRecordError: (error: unknown) => void;

  constructor(
    readonly binding: ReaderBinding<E>,
    onEvent: (event: E) => void,
    readonly onError: (error: Error) => void,
  ) {
    this.intervalMs = pollIntervalMs(binding.sizeBytes);
    this.#currentIntervalMs = this.intervalMs;
    this.#onEvent = onEvent;
    this.#onRecordError = (error) => {
      this.#failedInBatch++;
      if (error instanceof RangeError) {
        this.counters.decodeErrors++;
        return;
      }
      this.counters.handlerErrors++;
      if (this.#handlerErrorReported) return;
      this.#handlerErrorReported = true;
      this.onError(error instanceof Error ? error : new Error(String(error)));
    };
  }

  /** Poll interval in use now (adapted to how full the ring was found). */
  get currentIntervalMs(): number {
    return this.#currentIntervalMs;
  }

  /** Records a batch holds now (adapted to the measured cost per record). */
  get batchRecords(): number {
    return this.#batchRecords;
  }

  start(): void {
    if (this.#closed || this.#timer || this.#immediate) return;
    this.#schedule(false);
  }

  /** Reads at most one batch of what is available now (also used for a last drain before close). Returns records read. */
  drain(): number {
    if (this.#closed) return 0;
    this.#failedInBatch = 0;
    this.#handlerErrorReported = false;
    const n = this.binding.reader.consumeDecoded(this.binding.decode, this.#onEvent, this.#batchRecords, this.#onRecordError);
    const received = n - this.#failedInBatch;
    this.counters.received += received;
    this.onBatch?.(received);
    return n;
  }

  #schedule(more: boolean): void {
    if (this.#closed) return;
    if (more) this.#immediate = setImmediate(() => this.#tick(true));
    else this.#timer = setTimeout(() => this.#tick(false), this.#currentIntervalMs);
  }

  #tick(followUp: boolean): void {
    this.#timer = undefined;
    this.#immediate = undefined;
    const reader = this.binding.reader;
    if (!followUp && reader.pendingBytes) {
      const fraction = reader.pendingBytes() / this.binding.sizeBytes;
      this.#currentIntervalMs = nextPollIntervalMs(this.#currentIntervalMs, this.intervalMs, fraction);
    }
    const batch = this.#batchRecords;
    const t0 = performance.now();
    let n = 0;
    try {
      n = this.drain();
    } catch (e) {
      this.onError(e as Error);
    }
    const ms = performance.now() - t0;
    this.counters.turns++;
    if (ms > this.counters.longestTurnMs) this.counters.longestTurnMs = ms;
    this.onTurn?.(ms, n);
    if (n >= MIN_TIMED_RECORDS) this.#batchRecords = batchRecords((ms * 1e6) / n);
    this.#schedule(n >= batch);
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
