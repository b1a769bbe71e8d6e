/**
 * What the eBPF components of one agent share: the libbpf runtime and environment report (prepared once, on
 * the first set's start), the process table, the `ebpf` status view and the ebpf_* metrics. Lost counters are
 * read on a timer; map entries are counted by sweeps sliced into bounded steps between event loop turns
 * (hash map iteration costs ~2-3 µs per key here: 65k keys in one go would stall the loop ~150 ms). The view
 * is a cheap snapshot of the last values.
 */
import type { BaseContext } from "../lifecycle/context";
import type { Config } from "../config/schema";
import { bytesOf } from "../config/units";
import type { BpfMapApi, BpfRuntime, EntryCounter } from "../../ffi/types";
import type { ReadinessWait } from "../../ffi/ring-wait";
import { EBPF_STATUS, type EbpfSummary, type EbpfView } from "./status";
import { checkEnvironment, type EnvironmentProbe, type EnvironmentReport } from "./environment";
import { FeatureProbes } from "./features";
import { roundRingbufSize, type LoadedSet } from "./loader";
import { ProcessTable } from "./process-table";
import { PollTicker, RING_WAIT_TIMEOUT_MS, type RecordPump } from "./pump";
import type { ProgramSetSpec, ProgramStatus } from "./spec";

export const REFRESH_INTERVAL_MS = 2000;
/** Upper bound of keys counted per hash map per sweep. */
export const MAP_COUNT_LIMIT = 65_536;
/** Keys iterated per event loop turn during a sweep (~5 ms at the per-key cost measured here). */
export const MAP_SWEEP_SLICE_KEYS = 2048;
/** Pause between the end of one map sweep and the start of the next. */
export const MAP_SWEEP_INTERVAL_MS = 10_000;
const VERIFIER_LOGS_KEPT = 16;

/** The native side, injectable: tests pass fakes. */
export interface EbpfDeps {
  openRuntime(env: Record<string, string | undefined>): Promise<BpfRuntime>;
  objectBytes(name: string): Promise<Uint8Array>;
  environment(): EnvironmentProbe;
  /** The waiter the poll ticker hands the rings to while they are all quiet (ffi/ring-wait.ts); without it the ticker polls on its timer alone. */
  openRingWaiter?(timeoutMs: number): ReadinessWait;
}

export type Prepared =
  | { ok: true; runtime: BpfRuntime; probes: FeatureProbes; environment: EnvironmentReport }
  | { ok: false; reason: string; environment: EnvironmentReport | undefined };

/** What a set component records in the core for the view and the metrics. */
export interface SetRecord {
  programs: ProgramStatus[];
  loaded: LoadedSet<unknown> | undefined;
  pumps: Array<RecordPump<unknown>>;
}

interface MapView {
  name: string;
  type: string;
  entries: number;
  max_entries: number;
}

export class EbpfCore {
  readonly processes: ProcessTable;
  /** One poll timer for the ring and perf buffers of every set (wakeups do not grow with the number of rings). */
  readonly ticker: PollTicker;
  readonly #ctx: BaseContext;
  readonly #deps: EbpfDeps;
  readonly #sets = new Map<string, SetRecord>();
  readonly #lostSeen = new Map<string, bigint>();
  readonly #lostTotal = new Map<string, bigint>();
  readonly #verifierLogs: Array<{ program: string; log: string; at: string }> = [];
  #prepared: Promise<Prepared> | undefined;
  #runtime: BpfRuntime | undefined;
  #maps: MapView[] = [];
  #sweep: Promise<void> | undefined;
  /** A set was recorded while a sweep ran (whose targets were fixed before it): sweep again as soon as it ends. */
  #sweepAgain = false;
  #sweepTimer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  #timer: ReturnType<typeof setInterval> | undefined;
  #endTask: (() => void) | undefined;
  #tlsView: (() => NonNullable<EbpfView["tls"]>) | undefined;
  /** Per set: the last sums of svc_gate_refused (exchanges, other events). */
  readonly #gateRefusedSeen = new Map<string, [bigint, bigint]>();

  constructor(ctx: BaseContext, deps: EbpfDeps, processes = new ProcessTable()) {
    this.#ctx = ctx;
    this.#deps = deps;
    this.processes = processes;
    const openRingWaiter = deps.openRingWaiter;
    this.ticker = new PollTicker(
      openRingWaiter && {
        open: () => openRingWaiter(RING_WAIT_TIMEOUT_MS),
        onUnavailable: (reason) => ctx.logger.warn("ring buffers are polled on a timer only: no waiting for records", { reason }),
      },
    );
    ctx.memory?.subscribe(() => {
      for (const [set, rec] of this.#sets) this.#applyGate(set, rec);
    });
    ctx.status.provide(
      EBPF_STATUS.name,
      () => this.view(),
      () => this.summary(),
    );
  }

  get config(): Config["agent"]["ebpf"] {
    return this.#ctx.config.agent.ebpf;
  }

  /** The configuration in force now. */
  ctxConfig(): Config {
    return this.#ctx.config;
  }

  /** The bytes of an embedded object. */
  objectBytes(name: string): Promise<Uint8Array> {
    return this.#deps.objectBytes(name);
  }

  /** Runs a bounded piece of background work (a program set's load) as a tracked operation (self-traced). */
  track(name: string, fn: () => Promise<void>): Promise<void> {
    return this.#ctx.tasks.track(name, fn, "operation");
  }

  /**
   * agent.ebpf.ringbuf_size (read into bytes at load) rounded up to a power of two, or undefined for `auto` (each
   * ring sized by its set's spec).
   */
  ringbufSizeBytes(): number | undefined {
    if (this.config.ringbuf_size === "auto") return undefined;
    return roundRingbufSize(bytesOf(this.config, "ringbuf_size"));
  }

  /** The ring size the views show: the configured one, or with `auto` the largest ring loaded (0 before any). */
  #shownRingbufSize(): number {
    const configured = this.ringbufSizeBytes();
    if (configured !== undefined) return configured;
    let largest = 0;
    for (const rec of this.#sets.values()) for (const b of rec.loaded?.readers ?? []) if (b.kind === "ringbuf") largest = Math.max(largest, b.sizeBytes);
    return largest;
  }

  /** Loads libbpf and checks the environment, once; every set awaits the same answer. */
  prepare(): Promise<Prepared> {
    this.#prepared ??= this.#prepare();
    return this.#prepared;
  }

  async #prepare(): Promise<Prepared> {
    const log = this.#ctx.logger.child({ component: "ebpf" });
    let runtime: BpfRuntime;
    try {
      runtime = await this.#deps.openRuntime(this.#ctx.env);
    } catch (e) {
      const reason = `libbpf unavailable: ${(e as Error).message}`;
      log.error("eBPF unavailable", { reason });
      return { ok: false, reason, environment: undefined };
    }
    this.#runtime = runtime;
    log.info("libbpf loaded", { source: runtime.info.source, path: runtime.info.path, version: runtime.info.version });
    this.applyConfig(this.#ctx.config);
    const environment = checkEnvironment(this.#deps.environment());
    for (const c of environment.checks) {
      const level = c.ok ? "info" : c.blocking ? "error" : "warn";
      log.write(level, "eBPF environment check", { check: c.name, ok: c.ok, detail: c.detail });
    }
    if (environment.blocked) return { ok: false, reason: environment.blocked, environment };
    return { ok: true, runtime, probes: new FeatureProbes(runtime), environment };
  }

  /** Applies agent.ebpf.debug: libbpf's log lines go to the logger at debug level. */
  applyConfig(config: Config): void {
    if (!this.#runtime) return;
    const log = this.#ctx.logger.child({ component: "ebpf", source: "libbpf" });
    this.#runtime.setLogSink(config.agent.ebpf.debug ? (level, line) => log.debug(line.replace(/^libbpf: /, ""), { libbpf_level: level }) : undefined);
  }

  /** Keeps (debug mode) and logs the verifier log of a program the kernel rejected. */
  verifierLog(set: string, program: string, log: string): void {
    if (!this.config.debug) return;
    this.#verifierLogs.push({ program: `${set}/${program}`, log, at: new Date().toISOString() });
    if (this.#verifierLogs.length > VERIFIER_LOGS_KEPT) this.#verifierLogs.shift();
    this.#ctx.logger.child({ component: `ebpf/${set}` }).debug("verifier log", { program, verifier_log: log });
  }

  /** The verifier logs kept in debug mode (most recent last). */
  verifierLogs(): ReadonlyArray<{ program: string; log: string; at: string }> {
    return this.#verifierLogs;
  }

  /** True while the memory limiter refuses new data (pumps then hold no more backlog in memory). */
  get memoryRefusing(): boolean {
    return this.#ctx.memory?.refusing ?? false;
  }

  /** Sets the memory gate flag (ffi/bpf/common.h SVC_MEMORY_GATE) of a loaded set that has one to the gate's state. */
  #applyGate(set: string, rec: SetRecord): void {
    const map = rec.loaded?.object.map("svc_gate");
    if (!map?.updateU32Key) return;
    try {
      map.updateU32Key(0, new Uint8Array(new Uint32Array([this.#ctx.memory?.refusing ? 1 : 0]).buffer));
    } catch (e) {
      this.#ctx.logger.warn("setting the memory gate of a program set failed", { set, error: (e as Error).message });
    }
  }

  /** Adds what the kernel refused behind the memory gate since the last read: exchanges count as dropped spans. */
  #readGate(set: string, rec: SetRecord): void {
    const map = rec.loaded?.object.map("svc_gate_refused");
    if (!map) return;
    const now: [bigint, bigint] = [map.sumPerCpuU64(0), map.sumPerCpuU64(1)];
    const seen = this.#gateRefusedSeen.get(set) ?? [0n, 0n];
    this.#gateRefusedSeen.set(set, now);
    const exchanges = Number(now[0] - seen[0]);
    const events = Number(now[1] - seen[1]);
    if (exchanges > 0) this.#ctx.metrics.spans.dropped.inc({ reason: "memory_limit" }, exchanges);
    if (this.#ctx.memory && exchanges + events > 0) this.#ctx.memory.refusedInKernel += exchanges + events;
  }

  /** Records (or replaces) a set's state. */
  record(set: string, rec: SetRecord): void {
    if (this.#sets.get(set)?.loaded?.object !== rec.loaded?.object) this.#gateRefusedSeen.delete(set);
    this.#sets.set(set, rec);
    this.#applyGate(set, rec);
    this.#ensureTimer();
    this.refresh();
    if (rec.loaded) void this.sweepMaps();
  }

  /** Forgets a set (it stopped); its last lost counts are read first. */
  remove(set: string): void {
    const rec = this.#sets.get(set);
    if (!rec) return;
    this.refresh();
    this.#sets.delete(set);
    if (![...this.#sets.values()].some((r) => r.loaded)) this.#stopTimer();
    this.#publishMaps(this.#maps.filter((m) => !m.name.startsWith(`${set}/`)));
    this.#ctx.metrics.ebpfProgramsLoaded.set(this.#programsLoaded());
  }

  /**
   * Creates the event and lost series of a set's ring buffers (and of their perf buffer fallbacks) at 0, before
   * any load: a query sees 0 rather than no data until the first event. Called once per set component.
   */
  declareBuffers(spec: ProgramSetSpec<unknown>): void {
    const m = this.#ctx.metrics;
    for (const rb of spec.ringBuffers) {
      m.ebpfRingbufEvents.inc({ ringbuf: `${spec.name}/${rb.map}` }, 0);
      m.ebpfRingbufLost.inc({ ringbuf: `${spec.name}/${rb.map}` }, 0);
      if (!rb.perfFallback) continue;
      m.ebpfPerfEvents.inc({ buffer: `${spec.name}/${rb.perfFallback.map}` }, 0);
      m.ebpfPerfLost.inc({ buffer: `${spec.name}/${rb.perfFallback.map}` }, 0);
    }
  }

  /** Counts events read by a pump (called once per batch). */
  countEvents(set: string, map: string, kind: "ringbuf" | "perfbuf", n: number): void {
    if (n === 0) return;
    const label = `${set}/${map}`;
    if (kind === "ringbuf") this.#ctx.metrics.ebpfRingbufEvents.inc({ ringbuf: label }, n);
    else this.#ctx.metrics.ebpfPerfEvents.inc({ buffer: label }, n);
  }

  /** Counts records lost: the kernel's count (refresh), or records a pump read and dropped without handing them on (a set stopping with records left: RecordPump.drainBeforeClose). */
  countLost(set: string, map: string, kind: "ringbuf" | "perfbuf", n: number): void {
    if (n === 0) return;
    const label = `${set}/${map}`;
    if (kind === "ringbuf") this.#ctx.metrics.ebpfRingbufLost.inc({ ringbuf: label }, n);
    else this.#ctx.metrics.ebpfPerfLost.inc({ buffer: label }, n);
  }

  #ensureTimer(): void {
    if (this.#timer || ![...this.#sets.values()].some((r) => r.loaded)) return;
    this.#timer = setInterval(() => this.refresh(), REFRESH_INTERVAL_MS);
    this.#endTask = this.#ctx.tasks.begin("ebpf map refresher");
  }

  #stopTimer(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    if (this.#sweepTimer) clearTimeout(this.#sweepTimer);
    this.#sweepTimer = undefined;
    this.#endTask?.();
    this.#endTask = undefined;
  }

  #programsLoaded(): number {
    let n = 0;
    for (const rec of this.#sets.values()) for (const p of rec.programs) if (p.id > 0) n++;
    return n;
  }

  /** Reads lost counters and map entry counts from the kernel and publishes them. Also run by the timer. */
  refresh(): void {
    const m = this.#ctx.metrics;
    for (const [set, rec] of this.#sets) {
      if (!rec.loaded) continue;
      try {
        this.#readGate(set, rec);
      } catch {
        // The set is being unloaded; its counts are gone with it.
      }
      for (const b of rec.loaded.readers) {
        const label = `${set}/${b.map}`;
        let total: bigint;
        try {
          total = b.kind === "ringbuf" ? (b.lostMap?.sumPerCpuU64(0) ?? 0n) : BigInt(b.reader.lostReported);
        } catch {
          continue;
        }
        const delta = total - (this.#lostSeen.get(label) ?? 0n);
        this.#lostSeen.set(label, total);
        this.#lostTotal.set(label, total);
        if (delta > 0n) this.countLost(set, b.map, b.kind, Number(delta));
      }
    }
    m.ebpfProgramsLoaded.set(this.#programsLoaded());
  }

  /**
   * Counts the entries of every map of the loaded sets, a bounded slice per event loop turn, then publishes
   * the counts (view and ebpf_map_entries) and schedules the next sweep. A call during a sweep makes another
   * sweep follow at once (a set loaded meanwhile is counted without waiting MAP_SWEEP_INTERVAL_MS); the promise
   * settles when the sweeps end.
   */
  sweepMaps(): Promise<void> {
    if (this.#sweep) {
      this.#sweepAgain = true;
      return this.#sweep;
    }
    this.#sweep = this.#sweepUntilCurrent().finally(() => {
      this.#sweep = undefined;
      if (this.#closed || ![...this.#sets.values()].some((r) => r.loaded)) return;
      // A set recorded between the loop's last check and here: sweep for it now, not a whole interval later.
      if (this.#sweepAgain) {
        void this.sweepMaps();
        return;
      }
      if (this.#sweepTimer) clearTimeout(this.#sweepTimer);
      this.#sweepTimer = setTimeout(() => void this.sweepMaps(), MAP_SWEEP_INTERVAL_MS);
    });
    return this.#sweep;
  }

  async #sweepUntilCurrent(): Promise<void> {
    do {
      this.#sweepAgain = false;
      await this.#runSweep();
    } while (this.#sweepAgain && !this.#closed);
  }

  async #runSweep(): Promise<void> {
    const targets: Array<{ set: string; loaded: LoadedSet<unknown>; map: BpfMapApi; counter: EntryCounter | undefined }> = [];
    for (const [set, rec] of this.#sets) {
      if (rec.loaded) for (const map of rec.loaded.maps()) targets.push({ set, loaded: rec.loaded, map, counter: undefined });
    }
    const results: MapView[] = [];
    for (const t of targets) {
      let done = false;
      while (!done) {
        // A set closed between slices: its maps (and descriptors) are gone.
        if (this.#sets.get(t.set)?.loaded !== t.loaded) break;
        try {
          t.counter ??= t.map.entryCounter(Math.min(t.map.maxEntries, MAP_COUNT_LIMIT));
          done = t.counter.step(MAP_SWEEP_SLICE_KEYS);
        } catch {
          break;
        }
        if (!done) await new Promise<void>((r) => setImmediate(r));
      }
      if (done) results.push({ name: `${t.set}/${t.map.name}`, type: t.map.typeName, entries: t.counter!.count, max_entries: t.map.maxEntries });
    }
    const live = new Set([...this.#sets].filter(([, r]) => r.loaded).map(([s]) => s));
    this.#publishMaps(results.filter((m) => live.has(m.name.slice(0, m.name.indexOf("/")))));
  }

  #publishMaps(maps: MapView[]): void {
    const gauge = this.#ctx.metrics.ebpfMapEntries;
    gauge.reset();
    for (const m of maps) gauge.set({ map: m.name }, m.entries);
    this.#maps = maps;
  }

  /** Sets (or, with undefined, removes) the provider of the view's `tls` list (the `tls` set, while attached). */
  setTlsView(fn: (() => NonNullable<EbpfView["tls"]>) | undefined): void {
    this.#tlsView = fn;
  }

  /** The `ebpf` status view (EbpfViewSchema): a snapshot of cached values, no kernel calls. */
  view(): EbpfView {
    const programs: EbpfView["programs"] = [];
    let received = 0;
    let lost = 0n;
    for (const [set, rec] of this.#sets) {
      for (const p of rec.programs) programs.push(p.reason === undefined ? { name: p.name, type: p.type, attached: p.attached, id: p.id } : { ...p });
      for (const pump of rec.pumps) received += pump.counters.received;
      for (const b of rec.loaded?.readers ?? []) lost += this.#lostTotal.get(`${set}/${b.map}`) ?? 0n;
    }
    const view: EbpfView = {
      enabled: this.config.enabled,
      programs,
      maps: this.#maps.map((m) => ({ ...m })),
      ringbuf: { size: this.#shownRingbufSize(), events_received: received, events_lost: Number(lost) },
    };
    if (this.#tlsView) view.tls = this.#tlsView();
    return view;
  }

  /** What /status shows of the view, from the same values, without copying programs or maps. */
  summary(): EbpfSummary {
    return { enabled: this.config.enabled, programs_loaded: this.#programsLoaded(), maps_created: this.#maps.length, ringbuf_size: this.#shownRingbufSize() };
  }

  /** Stops the refresher once every set is gone (the components call remove on shutdown). */
  close(): void {
    this.#closed = true;
    this.#stopTimer();
    if (this.#sweepTimer) clearTimeout(this.#sweepTimer);
    this.#sweepTimer = undefined;
  }
}
