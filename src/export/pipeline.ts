/**
 * The TelemetryPipeline: the front of the export chain (chain.ts) and its ledger. It encodes what collectors
 * submit and hands it to the signal's queue link; the batch link cuts batches into the pipeline's account link,
 * which counts them in flight and settles their outcome from retry -> measure -> timeout -> push. Exact
 * accounting: for every signal, at every instant (all of it runs on the event loop, and each transition moves
 * items between two counts in one synchronous step):
 *   collected = exported + dropped + queued + in_flight
 */
import type { Config } from "../config/schema";
import { msOf, bytesOf } from "../config/units";
import type { Logger } from "../log/logger";
import type { AgentMetrics } from "../telemetry/metrics";
import { DROP_REASONS } from "../telemetry/metrics";
import type { MemoryGate } from "../memory/gate";
import type { BatchSender } from "./batcher";
import { ExportChain } from "./chain";
import { SIGNALS, queueDirectory, type Signal } from "./config";
import { ItemEncoder, buildRequest, type EncodedItem } from "./encode";
import { codeName } from "./outcome";
import { ProtoWriter } from "./wire";
import { PersistentQueue } from "./persistent-queue";
import { SignalQueue, type QueueSender, type Queued } from "./queue";
import { ResourceBuilder } from "./resource";
import type { RetryResult } from "./retry";
import type { PushSender } from "./sender";
import { suppressTracing } from "../telemetry/span-context";
import type { TaskRegistry } from "../telemetry/tasks";
import type { Attributes, DropReason, FlushResult, SignalAccounting, TelemetryPipeline } from "./types";

export type { DropReason, FlushResult, SignalAccounting } from "./types";

export interface PipelineOptions {
  config: Config;
  metrics: AgentMetrics;
  logger: Logger;
  /** Randomness of the backoff jitter (tests). */
  random?: () => number;
  /** Where each batch in flight is registered as an operation (go_goroutines, debug profiles, self-tracing). */
  tasks?: TaskRegistry;
  /** While it refuses (above the memory soft limit), submits are dropped as `memory_limit` and offers take nothing (src/memory). */
  gate?: MemoryGate;
  /** The links behind the pipeline (the exporter component builds them); a chain of its own when left out. */
  chain?: ExportChain;
}

interface Lane {
  signal: Signal;
  queue: SignalQueue;
  /** The signal's first links: queue -> batch. */
  queueLink: QueueSender;
  batch: BatchSender;
  collected: number;
  exported: number;
  dropped: Record<DropReason, number>;
  /** Sum of `dropped`, kept as drops are counted. */
  droppedTotal: number;
  inFlight: number;
  /**
   * Request buffers written again by the lane's later batches. A batch holds its buffer until its final outcome
   * (every retry sends the same bytes) and hands it back only on success, when the transport has sent all of it
   * (an attempt given up on may still be read by its transport); at most REQUEST_WRITERS_KEPT, each at most
   * REQUEST_WRITER_KEPT_BYTES.
   */
  requestWriters: ProtoWriter[];
}

const REQUEST_WRITERS_KEPT = 2;
const REQUEST_WRITER_KEPT_BYTES = 4 * 1024 * 1024;

const zeroDrops = (): Record<DropReason, number> => Object.fromEntries(DROP_REASONS.map((r) => [r, 0])) as Record<DropReason, number>;

export class OtlpPipeline implements TelemetryPipeline {
  readonly resource: ResourceBuilder;
  readonly #metrics: AgentMetrics;
  readonly #logger: Logger;
  readonly #encoder: ItemEncoder;
  readonly #lanes: Record<Signal, Lane>;
  readonly #tasks: TaskRegistry | undefined;
  readonly #gate: MemoryGate | undefined;
  readonly #drainWaiters = new Set<() => void>();
  readonly #flushSources = new Set<() => void>();
  readonly #chain: ExportChain;
  #config: Config;
  #closed = false;
  #shutdown: Promise<void> | undefined;

  constructor(o: PipelineOptions) {
    this.#config = o.config;
    this.#metrics = o.metrics;
    this.#logger = o.logger;
    this.#tasks = o.tasks;
    this.#gate = o.gate;
    this.#chain = o.chain ?? new ExportChain(o);
    this.#chain.onWait = () => this.#notifyDrain();
    this.resource = new ResourceBuilder(o.config.service_name);
    this.resource.setOwnAttributes(o.config.resource_attributes);
    this.#encoder = new ItemEncoder(this.resource.encoder);
    this.#lanes = Object.fromEntries(SIGNALS.map((s) => [s, this.#makeLane(s)])) as Record<Signal, Lane>;
  }

  #makeLane(signal: Signal): Lane {
    const q = this.#config.queues[signal];
    const queue = q.persistent ? this.#persistentQueue(signal) : new SignalQueue(q.capacity, bytesOf(q, "mem_limit"));
    const lane = { signal, queue, collected: 0, exported: 0, dropped: zeroDrops(), droppedTotal: 0, inFlight: 0, requestWriters: [] as ProtoWriter[] } as Lane;
    // The account link between the batch and retry: counts the batch in flight and settles its outcome.
    const links = this.#chain.lane(signal, queue, { send: (items) => this.#sendBatch(lane, items) });
    lane.queueLink = links.queue;
    lane.batch = links.batch;
    if (queue instanceof PersistentQueue) {
      // Items read back from disk were collected by an earlier run: they count as collected by this one.
      const lost = queue.restoredDropped;
      const total = queue.restored + lost.queue_full + lost.mem_limit;
      lane.collected += total;
      this.#metrics.signal(signal).collected.inc(total);
      if (lost.queue_full) this.#drop(lane, "queue_full", lost.queue_full);
      if (lost.mem_limit) this.#drop(lane, "mem_limit", lost.mem_limit);
      this.#metrics.exportQueueSize.set({ signal }, queue.size);
      if (total || queue.truncatedRecords)
        this.#logger.info("persistent queue read back", { signal, items: queue.restored, dropped: lost, truncated_records: queue.truncatedRecords });
    }
    return lane;
  }

  #persistentQueue(signal: Signal): PersistentQueue {
    const q = this.#config.queues[signal];
    return new PersistentQueue({
      directory: queueDirectory(this.#config.storage, signal),
      capacity: q.capacity,
      memLimitBytes: bytesOf(q, "mem_limit"),
      fsyncIntervalMs: msOf(this.#config.storage, "fsync_interval"),
      onDiskFull: (full, error) =>
        full
          ? this.#logger.error("persistent queue: disk full, items dropped as disk_full until space is back", { signal, error })
          : this.#logger.info("persistent queue: writing again", { signal }),
    });
  }

  /** The configuration in force. */
  get config(): Config {
    return this.#config;
  }

  /** Whether shutdown has begun (submits are dropped as `shutdown`). */
  get closed(): boolean {
    return this.#closed;
  }

  /** Sends every attempt through `push` from now on (batches already retrying included); a previous push is closed once idle. */
  connect(push: PushSender): void {
    this.#chain.connect(push);
  }

  /** Applies queue limits, batch settings, backoff, timeout and service name of `next`. Cannot fail. */
  applyConfig(next: Config): void {
    for (const s of SIGNALS)
      if (next.queues[s].persistent !== this.#lanes[s].queue instanceof PersistentQueue || (next.queues[s].persistent && next.storage.directory !== this.#config.storage.directory))
        this.#logger.warn("queue persistence and storage.directory take effect at the next start", { signal: s, persistent: next.queues[s].persistent });
    this.#config = next;
    this.#chain.applyConfig(next);
    this.resource.setServiceName(next.service_name);
    this.resource.setOwnAttributes(next.resource_attributes);
    for (const s of SIGNALS) {
      const q = this.#lanes[s].queue;
      q.capacity = next.queues[s].capacity;
      q.memLimitBytes = bytesOf(next.queues[s], "mem_limit");
      this.#lanes[s].batch.send();
    }
  }

  /** `items` encoded one by one as the queue link takes them; undefined for one that cannot be (the first failure of a call is logged). */
  *#encoded(signal: Signal, items: readonly unknown[]): Generator<EncodedItem | undefined> {
    let warned = false;
    for (const item of items) {
      try {
        yield this.#encoder.encode(signal, item);
      } catch (e) {
        if (!warned) this.#logger.warn("item cannot be encoded; dropped", { signal, error: (e as Error).message });
        warned = true;
        yield undefined;
      }
    }
  }

  submit(signal: Signal, items: readonly unknown[]): number {
    const lane = this.#lanes[signal];
    if (!lane || items.length === 0) return 0;
    const counters = this.#metrics.signal(signal);
    lane.collected += items.length;
    counters.collected.inc(items.length);
    if (this.#closed) {
      this.#drop(lane, "shutdown", items.length);
      return 0;
    }
    if (this.#gate?.refusing) {
      this.#drop(lane, "memory_limit", items.length);
      return 0;
    }
    const r = lane.queueLink.send({ items: this.#encoded(signal, items), prefix: false });
    this.#dropRefused(lane, r);
    this.#metrics.exportQueueSize.set({ signal }, lane.queue.size);
    return r.accepted;
  }

  offer(signal: Signal, items: readonly unknown[]): number {
    const lane = this.#lanes[signal];
    if (!lane || this.#closed || items.length === 0 || this.#gate?.refusing) return 0;
    const r = lane.queueLink.send({ items: this.#encoded(signal, items), prefix: true });
    if (r.taken > 0) {
      lane.collected += r.taken;
      this.#metrics.signal(signal).collected.inc(r.taken);
    }
    this.#dropRefused(lane, r);
    this.#metrics.exportQueueSize.set({ signal }, lane.queue.size);
    return r.taken;
  }

  /** Counts what the queue link refused: capacity, mem_limit, disk, and items that could not be encoded. */
  #dropRefused(lane: Lane, r: Queued): void {
    if (r.queue_full) this.#drop(lane, "queue_full", r.queue_full);
    if (r.mem_limit) this.#drop(lane, "mem_limit", r.mem_limit);
    if (r.disk_full) this.#drop(lane, "disk_full", r.disk_full);
    if (r.invalid) this.#drop(lane, "permanent_error", r.invalid);
  }

  /** Queue capacity left for `signal` (0 after shutdown); mem_limit may still refuse some of it. */
  room(signal: Signal): number {
    const lane = this.#lanes[signal];
    if (!lane || this.#closed || this.#gate?.refusing) return 0;
    if (lane.queue instanceof PersistentQueue && lane.queue.diskFull) return 0;
    return Math.max(0, lane.queue.capacity - lane.queue.size);
  }

  setResourceAttributes(source: string, attributes: Attributes): void {
    this.resource.set(source, attributes);
  }

  addFlushSource(pull: () => void): () => void {
    const entry = () => pull();
    this.#flushSources.add(entry);
    return () => void this.#flushSources.delete(entry);
  }

  async flush(timeoutMs: number): Promise<FlushResult> {
    const perSignal = (f: (l: Lane) => number) => Object.fromEntries(SIGNALS.map((s) => [s, f(this.#lanes[s])])) as Record<Signal, number>;
    const exportedBefore = perSignal((l) => l.exported);
    const droppedBefore = perSignal((l) => l.droppedTotal);
    for (const pull of this.#flushSources) {
      try {
        pull();
      } catch (e) {
        this.#logger.warn("flush: a collector could not hand over its pending data", { error: (e as Error).message });
      }
    }
    const push = this.#closed ? undefined : this.#chain.push;
    const since = this.#chain.retry.waits;
    if (push) {
      push.beforeRetryAll();
      for (const s of SIGNALS) this.#lanes[s].batch.urgent(true);
      this.#chain.retry.wakeAll();
      try {
        await this.#waitFor(() => this.#drained() || this.#chain.retry.allFailedSince(since), AbortSignal.timeout(Math.max(0, timeoutMs)));
      } finally {
        for (const s of SIGNALS) this.#lanes[s].batch.urgent(false);
      }
    }
    const result: FlushResult = {
      exported: perSignal((l) => l.exported - exportedBefore[l.signal]),
      dropped: perSignal((l) => l.droppedTotal - droppedBefore[l.signal]),
      remaining: perSignal((l) => l.queue.size + l.inFlight),
    };
    if (!SIGNALS.some((s) => result.remaining[s] > 0)) return result;
    result.reason = !push ? "not_running" : this.#chain.retry.allFailedSince(since) ? "export_failed" : "timeout";
    const lastError = this.#chain.retry.lastError();
    if (lastError) result.lastError = lastError;
    return result;
  }

  /** The counts of every signal now; `collected = exported + droppedTotal + queued + inFlight` holds for each. */
  accounting(): Record<Signal, SignalAccounting> {
    const out = {} as Record<Signal, SignalAccounting>;
    for (const s of SIGNALS) {
      const l = this.#lanes[s];
      out[s] = {
        collected: l.collected,
        exported: l.exported,
        dropped: { ...l.dropped },
        droppedTotal: l.droppedTotal,
        queued: l.queue.size,
        queuedBytes: l.queue.bytes,
        inFlight: l.inFlight,
      };
    }
    return out;
  }

  /** Items of `signal` exported so far, as accounting() counts them (without building it: status views). */
  exportedCount(signal: Signal): number {
    return this.#lanes[signal].exported;
  }

  /** Items of `signal` dropped so far, every reason (accounting()'s droppedTotal). */
  droppedCount(signal: Signal): number {
    return this.#lanes[signal].droppedTotal;
  }

  /** Items of `signal` queued now (accounting()'s queued). */
  queuedCount(signal: Signal): number {
    return this.#lanes[signal].queue.size;
  }

  /**
   * Stops retries (a batch waiting to be retried is tried once more at once), drains the queues (one attempt per
   * batch) until `deadline`, then cancels what is in flight;
   * everything not exported is dropped as `shutdown`. Idempotent; submits from now on are dropped.
   */
  shutdown(deadline: AbortSignal): Promise<void> {
    this.#shutdown ??= this.#doShutdown(deadline);
    return this.#shutdown;
  }

  async #doShutdown(deadline: AbortSignal): Promise<void> {
    this.#closed = true;
    const push = this.#chain.push;
    push?.beforeRetryAll();
    this.#chain.retry.stop();
    if (push) {
      for (const s of SIGNALS) this.#lanes[s].batch.urgent(true);
      await this.#waitDrained(deadline);
    }
    for (const s of SIGNALS) this.#lanes[s].batch.stop();
    if (!this.#drained()) {
      this.#chain.timeout.cancelAll();
      await this.#waitInFlightDone();
    }
    for (const s of SIGNALS) {
      const lane = this.#lanes[s];
      const rest = lane.queue.take(lane.queue.size).length;
      if (rest) this.#drop(lane, "shutdown", rest);
      this.#metrics.exportQueueSize.set({ signal: s }, 0);
      if (lane.queue instanceof PersistentQueue) {
        lane.queue.close();
        this.#logger.info("persistent queue closed; items not exported stay on disk for the next start", { signal: s, committed: lane.queue.committed });
      }
    }
    this.#chain.push?.close();
    this.#notifyDrain();
  }

  /**
   * Sends one batch as a tracked operation, so self-tracing sees export batches. Batches of the traces signal are
   * not traced themselves: their span would be exported in a later traces batch, forever.
   */
  #sendBatch(lane: Lane, items: EncodedItem[]): Promise<void> {
    const tasks = this.#tasks;
    if (!tasks) return this.#sendBatchNow(lane, items);
    const send = () => tasks.track(`export batch ${lane.signal}`, () => this.#sendBatchNow(lane, items));
    return lane.signal === "traces" ? suppressTracing(send) : send();
  }

  async #sendBatchNow(lane: Lane, items: EncodedItem[]): Promise<void> {
    const n = items.length;
    const signal = lane.signal;
    lane.inFlight += n;
    this.#metrics.exportQueueSize.set({ signal }, lane.queue.size);
    this.#metrics.exportBatchSize.observe({ signal }, n);
    let result: RetryResult;
    let writer: ProtoWriter | undefined;
    try {
      writer = lane.requestWriters.pop() ?? new ProtoWriter();
      const body = buildRequest(signal, items, this.resource.encoder, writer);
      this.#encoder.release(items);
      result = await this.#chain.retry.send({ signal, body, items: n });
    } catch (e) {
      this.#logger.error("export batch failed unexpectedly", { signal, error: (e as Error).message });
      result = { kind: "failure", code: 2, message: (e as Error).message };
    }
    lane.inFlight -= n;
    if (result.kind === "success" && writer && writer.buf.length <= REQUEST_WRITER_KEPT_BYTES && lane.requestWriters.length < REQUEST_WRITERS_KEPT) lane.requestWriters.push(writer);
    // Exported or dropped for good: a persistent queue may forget the batch (not when abandoned at shutdown: sent again at the next start).
    if ((result.kind === "success" || result.kind === "failure") && lane.queue instanceof PersistentQueue) lane.queue.done(items);
    if (result.kind === "success") {
      const rejected = Math.min(n, result.rejected);
      this.#exported(lane, n - rejected);
      if (rejected) this.#drop(lane, "partial_success", rejected);
      // A message with nothing rejected is the OTLP partial_success warning form (or a 2xx body that did not decode).
      if (result.message && rejected) this.#logger.warn("backend accepted part of a batch", { signal, items: n, rejected, message: result.message });
      else if (result.message) this.#logger.warn("backend accepted a batch with a message", { signal, items: n, message: result.message });
    } else if (result.kind === "failure") {
      this.#drop(lane, "permanent_error", n);
      this.#logger.warn("export batch dropped: permanent error", { signal, items: n, error: `${codeName(result.code)}: ${result.message}` });
    } else {
      this.#drop(lane, "shutdown", n);
    }
    this.#notifyDrain();
  }

  #exported(lane: Lane, n: number): void {
    if (!n) return;
    lane.exported += n;
    this.#metrics.signal(lane.signal).exported.inc(n);
  }

  #drop(lane: Lane, reason: DropReason, n: number): void {
    lane.dropped[reason] += n;
    lane.droppedTotal += n;
    this.#metrics.signal(lane.signal).dropped.inc({ reason }, n);
  }

  #drained(): boolean {
    return SIGNALS.every((s) => this.#lanes[s].queue.size === 0 && this.#lanes[s].inFlight === 0);
  }

  #notifyDrain(): void {
    for (const w of [...this.#drainWaiters]) w();
  }

  /** Resolves when every queue is empty and nothing is in flight, or when `until` aborts. */
  #waitDrained(until: AbortSignal): Promise<void> {
    return this.#waitFor(() => this.#drained(), until);
  }

  #waitInFlightDone(): Promise<void> {
    return this.#waitFor(() => SIGNALS.every((s) => this.#lanes[s].inFlight === 0));
  }

  #waitFor(cond: () => boolean, until?: AbortSignal): Promise<void> {
    if (cond() || until?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        this.#drainWaiters.delete(check);
        until?.removeEventListener("abort", done);
        resolve();
      };
      const check = () => {
        if (cond()) done();
      };
      this.#drainWaiters.add(check);
      until?.addEventListener("abort", done, { once: true });
    });
  }
}
