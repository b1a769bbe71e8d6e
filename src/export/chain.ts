/**
 * The export chain, wired in one place. Per signal: queue (queue.ts) -> batch (batcher.ts) -> account (the
 * pipeline's ledger); then, shared by the signals: retry (retry.ts) -> measure -> timeout -> push (sender.ts).
 * The exporter component builds it, with the pipeline as its front, and plugs in the push over its transport
 * when it starts (`connect`); until then batches are held in the queues.
 */
import type { Config } from "../config/schema";
import { msOf } from "../config/units";
import type { AgentMetrics } from "../telemetry/metrics";
import { BatchSender, type BatcherSettings } from "./batcher";
import { SIGNALS, signalTarget, type Signal } from "./config";
import type { EncodedItem } from "./encode";
import { QueueSender, type SignalQueue } from "./queue";
import { RetrySender } from "./retry";
import { MeasureSender, Slot, TimeoutSender, type PushSender, type Sender } from "./sender";

/** The configuration's durations, parsed once per (re)load rather than per batch. */
interface ParsedSettings {
  /** Batching with `queues.<signal>.max_in_flight` batches outstanding (once a push is connected). */
  batch: Record<Signal, BatcherSettings>;
  /** The same with nothing sent (no push yet). */
  held: Record<Signal, BatcherSettings>;
  backoff: { initialMs: number; maxMs: number };
  /** otlp.timeout, or the signal's own (otlp.signals.<signal>.timeout). */
  timeoutMs: Record<Signal, number>;
}

function parseSettings(c: Config): ParsedSettings {
  const settings = (s: Signal, maxInFlight: number): BatcherSettings => ({ batchSize: c.queues[s].batch_size, batchTimeoutMs: msOf(c.queues[s], "batch_timeout"), maxInFlight });
  const batch = Object.fromEntries(SIGNALS.map((s) => [s, settings(s, c.queues[s].max_in_flight)])) as Record<Signal, BatcherSettings>;
  const held = Object.fromEntries(SIGNALS.map((s) => [s, settings(s, 0)])) as Record<Signal, BatcherSettings>;
  const timeoutMs = Object.fromEntries(SIGNALS.map((s) => [s, signalTarget(c.otlp, s).timeoutMs])) as Record<Signal, number>;
  return { batch, held, backoff: { initialMs: msOf(c.backoff, "initial"), maxMs: msOf(c.backoff, "max") }, timeoutMs };
}

export interface ChainOptions {
  config: Config;
  metrics: AgentMetrics;
  /** Randomness of the backoff jitter (tests). */
  random?: () => number;
}

/** One signal's links in front of the shared ones. */
export interface Lane {
  queue: QueueSender;
  batch: BatchSender;
}

export class ExportChain {
  /** The shared links: retry -> measure -> timeout -> the push. */
  readonly retry: RetrySender;
  readonly timeout: TimeoutSender;
  readonly #batches: BatchSender[] = [];
  #settings: ParsedSettings;
  readonly #push = new Slot<PushSender>();
  /** Called when a batch begins a backoff wait, after the state a flush reads was updated. */
  onWait: () => void = () => {};

  constructor(o: ChainOptions) {
    this.#settings = parseSettings(o.config);
    this.timeout = new TimeoutSender(() => this.#push.current!, (s) => this.#settings.timeoutMs[s]);
    this.retry = new RetrySender(new MeasureSender(this.timeout, o.metrics), {
      backoff: () => this.#settings.backoff,
      random: o.random,
      onRetry: (r) => o.metrics.exportRetries.inc({ signal: r.signal }),
      onWait: () => this.onWait(),
    });
  }

  /** Builds the front of `signal`'s chain: `queue` filled by a queue link, cut by a batch link into `account` (whose next is `retry`). */
  lane(signal: Signal, queue: SignalQueue, account: Sender<EncodedItem[], Promise<void>>): Lane {
    const batch = new BatchSender(queue, () => (this.#push.current ? this.#settings.batch[signal] : this.#settings.held[signal]), account);
    this.#batches.push(batch);
    return { queue: new QueueSender(queue, batch), batch };
  }

  /** The last link, once plugged in. */
  get push(): PushSender | undefined {
    return this.#push.current;
  }

  /** Sends every attempt through `push` from now on (batches already retrying included); a previous push is closed once idle. */
  connect(push: PushSender): void {
    this.#push.put(push);
    for (const b of this.#batches) b.send();
  }

  /** Applies batch settings, backoff and timeouts of `next` (batches already retrying included). */
  applyConfig(next: Config): void {
    this.#settings = parseSettings(next);
  }
}
