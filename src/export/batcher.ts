/**
 * The second link: cuts batches from a queue, when `batch_size` items are waiting or `batch_timeout` after
 * the first item of a partial batch arrived (at once when urgent: flush and shutdown), and hands them on
 * with at most `maxInFlight` batches outstanding.
 */
import type { EncodedItem } from "./encode";
import type { SignalQueue } from "./queue";

export interface BatcherSettings {
  batchSize: number;
  batchTimeoutMs: number;
  maxInFlight: number;
}

export class Batcher {
  readonly #queue: SignalQueue;
  readonly #settings: () => BatcherSettings;
  readonly #onBatch: (items: EncodedItem[]) => Promise<void>;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerFired = false;
  #inFlight = 0;
  #urgent = 0;
  #stopped = false;

  /** `onBatch` is called synchronously with each batch cut; its promise settles when the batch is done with. */
  constructor(queue: SignalQueue, settings: () => BatcherSettings, onBatch: (items: EncodedItem[]) => Promise<void>) {
    this.#queue = queue;
    this.#settings = settings;
    this.#onBatch = onBatch;
  }

  /** Batches outstanding now. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Items were added: send what is due. Cheap; call after every offer. */
  kick(): void {
    if (!this.#stopped) this.#pump();
  }

  /** While urgent (nested calls counted), partial batches go out without waiting for the timeout. */
  urgent(on: boolean): void {
    this.#urgent += on ? 1 : -1;
    this.kick();
  }

  /** Stops cutting batches (outstanding ones still finish). Idempotent. */
  stop(): void {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #pump(): void {
    const s = this.#settings();
    while (this.#inFlight < s.maxInFlight && this.#queue.size > 0) {
      if (this.#queue.size < s.batchSize && this.#urgent === 0 && !this.#timerFired) {
        this.#timer ??= setTimeout(() => {
          this.#timer = undefined;
          this.#timerFired = true;
          this.kick();
        }, s.batchTimeoutMs);
        return;
      }
      const batch = this.#queue.take(s.batchSize);
      if (this.#queue.size === 0) {
        this.#timerFired = false;
        if (this.#timer) clearTimeout(this.#timer);
        this.#timer = undefined;
      }
      this.#inFlight++;
      void this.#onBatch(batch).finally(() => {
        this.#inFlight--;
        this.kick();
      });
    }
  }
}
