/**
 * Component `exporter/otlp` (readiness `otlp`): builds and owns the export chain (chain.ts: queue -> batch ->
 * account -> retry -> measure -> timeout -> push) with the pipeline as its front, and plugs in the last link,
 * the push over the transport, at start; reports whether the
 * backend can be reached (after every export outcome, and by a connectivity check, an empty Export call,
 * while no export has told; while connections are refused, the transport's refusal probe answers first and the
 * call is made only once it no longer says refused), publishes the status view `export`, reloads and drains on shutdown.
 */
import type { BaseContext } from "../lifecycle/context";
import type { Config } from "../config/schema";
import { msOf } from "../config/units";
import type { Component, ComponentHost } from "../lifecycle/component";
import { EXPORT_STATUS, type ExportSummary, type ExportView } from "./status";
import { SIGNALS, signalTarget, type Signal } from "./config";
import { describe, isUnreachable, readinessReason, REFUSED_REASON, type ExportOutcome } from "./outcome";
import { ExportChain } from "./chain";
import { OtlpPipeline } from "./pipeline";
import { TransportSender, type PushSender, type TimedRequest } from "./sender";
import type { Transport } from "./transport";
import { transportFor } from "./transport-select";

/** How often the backend is checked while exports are idle and the last outcome was good. */
export const IDLE_CHECK_INTERVAL_MS = 15_000;
/** How often the channel's state is looked at (no network: a lost connection triggers a check at once). */
const CHANNEL_WATCH_MS = 1000;
/** Bounds of the check interval while the backend is unreachable (backoff.initial, clamped). */
const UNHEALTHY_CHECK_MIN_MS = 20;
const UNHEALTHY_CHECK_MAX_MS = 5_000;
const EMPTY_REQUEST = new Uint8Array(0);

export interface ExporterOptions {
  /** Overrides IDLE_CHECK_INTERVAL_MS (tests). */
  idleCheckIntervalMs?: number;
  /** Builds the transport (tests may pass a fake); default transportFor (otlp.protocol). Throws when the configuration cannot be applied. */
  transportFactory?: (config: Config) => Transport;
  /** Randomness of the backoff jitter (tests). */
  random?: () => number;
}

/** Whether two configurations need a different transport. */
function transportChanged(next: Config, prev: Config): boolean {
  return JSON.stringify(next.otlp) !== JSON.stringify(prev.otlp) || JSON.stringify(next.backoff) !== JSON.stringify(prev.backoff);
}

export class OtlpExporterComponent implements Component {
  readonly id = "exporter/otlp";
  readonly readiness = "otlp" as const;
  /** The front of the chain: what collectors submit to. */
  readonly pipeline: OtlpPipeline;
  readonly #ctx: BaseContext;
  readonly #chain: ExportChain;
  readonly #pipeline: OtlpPipeline;
  readonly #factory: (config: Config) => Transport;
  readonly #idleCheckMs: number;
  /** The transport every attempt goes to. */
  readonly #sender = new TransportSender();
  /** The last link of the chain: the transport's answer, then what it says about the backend. */
  readonly #push: PushSender = {
    send: (r) => this.#send(r),
    beforeRetryAll: () => this.#reconnectIfDown(),
    close: () => this.#sender.close(),
  };
  #host: ComponentHost | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #checking = false;
  #stopped = false;
  #reachable: boolean | undefined;
  #channelWasReady = false;
  #lastOutcomeAt = 0;
  #lastExport: string | null = null;
  #lastError: string | null = null;
  /** The last outcome was `connection refused`: checks first ask the transport whether that still holds. */
  #refused = false;
  #endTask: (() => void) | undefined;
  readonly #view = (): ExportView => this.view();
  readonly #summary = (): ExportSummary => this.summary();

  constructor(ctx: BaseContext, options: ExporterOptions = {}) {
    this.#ctx = ctx;
    this.#chain = new ExportChain({ config: ctx.config, metrics: ctx.metrics, random: options.random });
    this.pipeline = this.#pipeline = new OtlpPipeline({ config: ctx.config, metrics: ctx.metrics, logger: ctx.logger, tasks: ctx.tasks, gate: ctx.memory, chain: this.#chain });
    this.#factory = options.transportFactory ?? transportFor;
    this.#idleCheckMs = options.idleCheckIntervalMs ?? IDLE_CHECK_INTERVAL_MS;
  }

  /** One attempt of a batch (never a connectivity check). */
  async #send(r: TimedRequest): Promise<ExportOutcome> {
    const started = performance.now();
    const outcome = await this.#sender.send(r);
    this.#onExport(r.signal, outcome, performance.now() - started, r.items);
    return outcome;
  }

  /**
   * Before a flush or the last attempts of shutdown: a transport that is not connected is replaced by a fresh one,
   * which connects at its first call. The old channel may be inside its reconnect backoff (up to backoff.max),
   * where every call fails at once even though the backend is back.
   */
  #reconnectIfDown(): void {
    const current = this.#sender.transport;
    if (!current || current.ready()) return;
    try {
      this.#sender.use(this.#factory(this.#pipeline.config));
    } catch (e) {
      this.#ctx.logger.warn("cannot rebuild the OTLP transport; keeping the current one", { component: this.id, error: (e as Error).message });
    }
  }

  async start(host: ComponentHost): Promise<void> {
    this.#host = host;
    this.#sender.use(this.#factory(this.#pipeline.config));
    this.#chain.connect(this.#push);
    this.#ctx.status.provide(EXPORT_STATUS.name, this.#view, this.#summary);
    this.#endTask = this.#ctx.tasks.begin("exporter/otlp connectivity check");
    host.report("starting", "connecting to the backend");
    this.#schedule(0);
  }

  /** The `export` status view. */
  view(): ExportView {
    const c = this.#pipeline.config;
    return {
      endpoint: c.otlp.endpoint,
      protocol: c.otlp.protocol,
      tls: !signalTarget(c.otlp, "traces").insecure,
      compression: c.otlp.compression,
      connected: this.#connected(),
      last_export: this.#lastExport,
      last_error: this.#lastError,
      queues: { traces: this.#queueView(c, "traces"), metrics: this.#queueView(c, "metrics"), logs: this.#queueView(c, "logs") },
    };
  }

  /** What /status shows of the view (same values), without the queues. */
  summary(): ExportSummary {
    const p = this.#pipeline;
    return {
      endpoint: p.config.otlp.endpoint,
      connected: this.#connected(),
      last_export: this.#lastExport,
      spans_exported: p.exportedCount("traces"),
      metrics_exported: p.exportedCount("metrics"),
    };
  }

  #queueView(c: Config, s: Signal): ExportView["queues"]["traces"] {
    const p = this.#pipeline;
    return { size: p.queuedCount(s), capacity: c.queues[s].capacity, exported: p.exportedCount(s), dropped: p.droppedCount(s) };
  }

  #connected(): boolean {
    return this.#reachable === true && this.#lastError === null && (this.#sender.transport?.ready() ?? false);
  }

  async reload(next: Config, previous: Config): Promise<void> {
    if (this.#stopped) return;
    let transport: Transport | undefined;
    if (this.#host && transportChanged(next, previous)) transport = this.#factory(next);
    this.#pipeline.applyConfig(next);
    if (transport) {
      this.#sender.use(transport);
      this.#lastError = null;
      this.#reachable = undefined;
      this.#refused = false;
      this.#schedule(0);
    }
  }

  async shutdown(deadline: AbortSignal): Promise<void> {
    const first = !this.#stopped;
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#pipeline.shutdown(deadline);
    if (first) {
      // The last word on what left and what did not (no scrape can follow an exit).
      const acc = this.#pipeline.accounting();
      const counts = Object.fromEntries(
        SIGNALS.map((s) => [s, { collected: acc[s].collected, exported: acc[s].exported, dropped_shutdown: acc[s].dropped.shutdown, dropped: acc[s].droppedTotal }]),
      );
      const lost = SIGNALS.reduce((n, s) => n + acc[s].dropped.shutdown, 0);
      if (lost) this.#ctx.logger.warn("export stopped; items not exported before the shutdown deadline were dropped", { component: this.id, dropped_shutdown: lost, ...counts });
      else this.#ctx.logger.info("export stopped; queues drained", { component: this.id, ...counts });
    }
    this.#ctx.status.withdraw(EXPORT_STATUS.name, this.#view);
    this.#endTask?.();
    this.#endTask = undefined;
  }

  #onExport(signal: Signal, outcome: ExportOutcome, latencyMs: number, items: number): void {
    this.#ctx.logger.debug("export batch", {
      component: this.id,
      signal,
      [signal === "traces" ? "spans" : signal]: items,
      latency_ms: Math.round(latencyMs),
      endpoint: this.#pipeline.config.otlp.endpoint,
      outcome: outcome.kind,
      ...(outcome.kind === "success" ? {} : { error: describe(outcome) }),
    });
    this.#apply(outcome);
  }

  #apply(outcome: ExportOutcome): void {
    if (this.#stopped) return;
    this.#lastOutcomeAt = performance.now();
    if (outcome.kind === "success") {
      this.#lastExport = new Date().toISOString();
      this.#lastError = null;
    } else this.#lastError = describe(outcome);
    const wasReachable = this.#reachable;
    this.#reachable = !isUnreachable(outcome);
    this.#refused = false;
    if (this.#reachable) this.#host?.report("ok");
    else {
      const reason = readinessReason(outcome as Exclude<ExportOutcome, { kind: "success" }>);
      // Refused: later checks probe with Transport.refusedNow first.
      this.#refused = reason === REFUSED_REASON;
      this.#host?.report("recoverable_error", reason);
    }
    if (wasReachable !== this.#reachable) this.#schedule(this.#interval());
  }

  #interval(): number {
    if (this.#reachable) return this.#idleCheckMs;
    const initial = msOf(this.#pipeline.config.backoff, "initial");
    return Math.min(UNHEALTHY_CHECK_MAX_MS, Math.max(UNHEALTHY_CHECK_MIN_MS, initial));
  }

  #schedule(ms: number): void {
    if (this.#stopped) return;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => void this.#tick(), ms);
  }

  async #tick(): Promise<void> {
    this.#timer = undefined;
    const interval = this.#interval();
    const sinceOutcome = performance.now() - this.#lastOutcomeAt;
    const ready = this.#sender.transport?.ready() ?? false;
    // The channel was connected and is not any more (the backend went away while exports were idle): check now
    // instead of at the next idle check, so that /ready does not say ok for up to IDLE_CHECK_INTERVAL_MS.
    const lost = this.#reachable === true && this.#channelWasReady && !ready;
    this.#channelWasReady = ready;
    if (!lost && this.#reachable !== undefined && sinceOutcome < interval) {
      this.#schedule(Math.min(interval - sinceOutcome, CHANNEL_WATCH_MS));
      return;
    }
    await this.#check();
    this.#channelWasReady = this.#sender.transport?.ready() ?? false;
    this.#schedule(Math.min(this.#interval(), CHANNEL_WATCH_MS));
  }

  /** One connectivity check: an empty traces Export call (a valid request every OTLP backend accepts). */
  async #check(): Promise<void> {
    const transport = this.#sender.transport;
    if (this.#checking || !transport || this.#stopped) return;
    this.#checking = true;
    try {
      const timeoutMs = msOf(this.#pipeline.config.otlp, "timeout");
      // Still refused: what the Export call would answer (same state, same reason), learned for a fraction of its cost.
      if (this.#refused && transport.refusedNow && (await transport.refusedNow(timeoutMs))) {
        if (transport === this.#sender.transport && this.#refused && !this.#stopped) this.#lastOutcomeAt = performance.now();
        return;
      }
      const outcome = await transport.send("traces", EMPTY_REQUEST, Date.now() + timeoutMs);
      if (transport === this.#sender.transport) this.#apply(outcome);
    } finally {
      this.#checking = false;
    }
  }
}
