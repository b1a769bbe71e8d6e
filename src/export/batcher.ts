/**
 * The second link: cuts batches from the queue the queue link fills, when `batch_size` items are waiting or
 * `batch_timeout` after the first item of a partial batch arrived (at once when urgent: flush and shutdown),
 * and hands them on with at most `maxInFlight` batches outstanding.
 */
import type { EncodedItem } from "./encode";
import type { SignalQueue } from "./queue";
import type { Sender } from "./sender";

export interface BatcherSettings {
  batchSize: number;
  batchTimeoutMs: number;
  maxInFlight: number;
}

/** `send()`: items were queued; hands on what is due now and arms the timer for a partial batch. */
export class BatchSender implements Sender<void, void> {
  readonly #queue: SignalQueue;
  readonly #settings: () => BatcherSettings;
  readonly #next: Sender<EncodedItem[], Promise<void>>;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerFired = false;
  #inFlight = 0;
  #urgent = 0;
  #stopped = false;

  /** `next.send` is called synchronously with each batch cut; its promise settles when the batch is done with. */
  constructor(queue: SignalQueue, settings: () => BatcherSettings, next: Sender<EncodedItem[], Promise<void>>) {
    this.#queue = queue;
    this.#settings = settings;
    this.#next = next;
  }

  /** Batches outstanding now. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Items were added (or the settings changed): send what is due. Cheap; called after every offer. */
  send(): void {
    if (!this.#stopped) this.#pump();
  }

  /** While urgent (nested calls counted), partial batches go out without waiting for the timeout. */
  urgent(on: boolean): void {
    this.#urgent += on ? 1 : -1;
    this.send();
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
          this.send();
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
      void this.#next.send(batch).finally(() => {
        this.#inFlight--;
        this.send();
      });
    }
  }
}
