/**
 * Component `ebpf/tls` (readiness `ebpf`): runs the `tls` program set and keeps its uprobes on the TLS libraries
 * processes load. At attach it scans the processes running (sliced between event loop turns); a process that
 * execs is scanned shortly after (its dynamic loader maps libssl after the exec) and again later (a library
 * opened with dlopen); every RESCAN_INTERVAL_MS all processes are scanned again, which also notices a library
 * unmapped. An exit releases the process's targets; a target no process holds is detached DETACH_DELAY_MS later
 * unless a process maps it again (checked with the stats every STATS_POLL_MS). The plaintext
 * records go to `sink` (the HTTP exchange tracker of `ebpf/network`, which makes the spans); HTTP/1.x exchanges
 * the kernel did not capture (over max_spans_per_second) are counted as rate_limit span drops. The targets show
 * in /status/ebpf under `tls`.
 */
import type { AgentContext } from "../context";
import type { Config } from "../../config/schema";
import type { EbpfCore } from "../../ebpf/core";
import { EbpfSetComponent, reloadSet } from "../../ebpf/component";
import type { LoadedSet } from "../../ebpf/loader";
import type { ProcessEvent } from "../../ebpf/sets/process-decoder";
import type { Component, ComponentHost } from "../../lifecycle/component";
import { ownKernelPid } from "../../ebpf/self";
import type { TlsEvent } from "./decoder";
import { TlsTargetRegistry } from "./registry";
import { DropWarnings, KernelStats } from "../network/kernel-stats";
import { configRedCounted, configTlsSocketCallsInNetworkSet, kernelExchangesPerSecond } from "../network/spec";
import { TLS_ENTRY_PROGRAMS, TLS_RETURN_PROGRAM, TlsStat, tlsLimits, tlsSetSpec } from "./spec";
import { procTargetSource, type TargetSource } from "./targets";
import { networkOf } from "../network/config";

/** After an exec: when the process's mappings are read (ms after the event). */
export const EXEC_SCAN_DELAYS_MS = [150, 1500, 5000] as const;
export const RESCAN_INTERVAL_MS = 30_000;
/**
 * How long a TLS library (or static executable) keeps its probes after the last process mapping it went: a client
 * run again and again (a script's curl, a cron job, a load generator) finds them in place instead of costing an
 * attach and a detach each time (8 uprobe links for a libssl, and reading the file's code). Probes on a file no
 * process runs cost nothing.
 */
export const DETACH_DELAY_MS = 60_000;
/** How often the kernel's count of exchanges not captured (over the budget) is read and counted as span drops. */
const STATS_POLL_MS = 1000;
/** Processes scanned per event loop turn during a full scan. */
const SCAN_SLICE_PROCESSES = 32;
/** Scans waiting after execs at most (an exec storm does not grow the queue without bound). */
const MAX_PENDING_EXEC_SCANS = 1024;

/** Where the plaintext goes, and what to forget when a process exits. */
export interface TlsSink {
  handleTls(e: TlsEvent): void;
  /**
   * Process `pid` exited at kernel time `exitNs`; `caughtUp` tells whether every tls_events record written until now
   * was handed on (its last plaintext records come through that ring and may be read well after the exit).
   */
  tlsProcessExited(pid: number, exitNs: bigint, caughtUp: () => boolean): void;
}

export function tlsEnabled(config: Config): boolean {
  const n = networkOf(config);
  return n.enabled && n.http && n.tls;
}

/** Whether HTTPS exchanges count in the RED maps: when the network set counts cleartext ones there. */
function tlsRedCounted(config: Config): boolean {
  return configRedCounted(networkOf(config));
}

export class TlsCollector implements Component {
  readonly id = "ebpf/tls";
  readonly readiness = "ebpf" as const;
  readonly #core: EbpfCore;
  readonly #sink: TlsSink;
  readonly #source: TargetSource;
  #inner: EbpfSetComponent<TlsEvent>;
  #maxTargets: number;
  #registry: TlsTargetRegistry | undefined;
  #unsubscribe: (() => void) | undefined;
  #rescanTimer: ReturnType<typeof setInterval> | undefined;
  readonly #pendingScans = new Map<number, Array<ReturnType<typeof setTimeout>>>();
  #scanning = false;
  #host: ComponentHost | undefined;
  readonly #ctx: AgentContext;
  readonly #selfPid: number;
  #set: LoadedSet<TlsEvent> | undefined;
  #statsTimer: ReturnType<typeof setInterval> | undefined;
  /** What the kernel's stats say was dropped, or could not be accounted for, and the HTTP/2 connections found midway. */
  readonly #kernelStats = new KernelStats({
    sampledOut: TlsStat.SAMPLED_OUT,
    h2Lost: TlsStat.H2_STOPPED_LOST,
    h2Midstream: TlsStat.H2_MIDSTREAM,
    h2Resumed: TlsStat.H2_RESUMED,
    uncounted: [{ index: TlsStat.RED_REPLACED, reason: "red_replaced" }],
  });
  readonly #dropWarnings = new DropWarnings();
  /** Pids written to the kernel's tls_tgids. */
  readonly #tgids = new Set<number>();
  /** Whether every tls_events record written until now was handed on. */
  readonly #caughtUp = (): boolean => this.#inner.caughtUp("tls_events");

  constructor(ctx: AgentContext, core: EbpfCore, sink: TlsSink, options: { selfPid?: number; source?: TargetSource } = {}) {
    this.#ctx = ctx;
    this.#core = core;
    this.#sink = sink;
    this.#source = options.source ?? procTargetSource();
    this.#selfPid = options.selfPid ?? ownKernelPid();
    this.#maxTargets = networkOf(ctx.config).max_tls_libraries;
    this.#inner = this.#newInner(ctx.config);
  }

  #newInner(config: Config): EbpfSetComponent<TlsEvent> {
    const network = networkOf(config);
    return new EbpfSetComponent<TlsEvent>(this.#core, {
      spec: tlsSetSpec({ selfPid: this.#selfPid, exchangesPerSecond: kernelExchangesPerSecond(network), h2RecordsPerSecond: network.http2_records_per_second, redCounted: tlsRedCounted(config), socketCallsInNetworkSet: configTlsSocketCallsInNetworkSet(network) }),
      onEvent: (e) => this.#sink.handleTls(e),
      onAttached: (set) => this.#attached(set),
      onDetached: () => this.#detached(),
      enabled: tlsEnabled,
    });
  }

  /**
   * Exchanges the kernel did not capture (over the per-second budget, or the ring half full) are span drops, as for
   * cleartext; so are the two directions of an HTTP/2 connection stopped with no record to say so (a record lost in
   * a full ring), as http2_state_lost (those stopped by a refused call say so in a record: rate_limit, counted where
   * it is read).
   */
  #pollStats(): void {
    const stats = this.#set?.object.map("tls_stats");
    if (!stats) return;
    try {
      const m = this.#ctx.metrics;
      const { uncounted } = this.#kernelStats.take(stats, { spans: m.spans.dropped, network: m.networkDropped, midstream: m.http2Midstream, resumed: m.http2Resumed });
      this.#dropWarnings.note(uncounted, performance.now(), this.#host?.logger);
    } catch (e) {
      this.#host?.logger.warn("reading tls stats failed", { error: (e as Error).message });
    }
  }

  /** The registry while the set is attached (tests). */
  get registry(): TlsTargetRegistry | undefined {
    return this.#registry;
  }

  #attached(set: LoadedSet<TlsEvent>): void {
    this.#set = set;
    this.#kernelStats.reset();
    this.#statsTimer = setInterval(() => {
      this.#pollStats();
      if (this.#registry && this.#registry.sweep() > 0) this.#refreshPrograms();
    }, STATS_POLL_MS);
    this.#statsTimer.unref?.();
    const programs = new Map(set.programs.map((p) => [p.name, p]));
    this.#registry = new TlsTargetRegistry(
      this.#source,
      (binary, site, ret) => {
        const name = ret ? TLS_RETURN_PROGRAM : TLS_ENTRY_PROGRAMS[site.program];
        const prog = set.object.program(name);
        if (!prog) throw new Error(`no program ${name}`);
        const kind = ret ? "uretprobe" : "uprobe";
        return prog.attach(site.offset === undefined ? { kind, binary, func: site.program } : { kind, binary, func: site.program, offset: site.offset });
      },
      this.#maxTargets,
      {
        detachDelayMs: DETACH_DELAY_MS,
        // Scans that found a file to attach while detaches were in flight: again, now that none is.
        onDetachesDone: () => {
          for (const pid of this.#registry?.takeDeferred() ?? []) this.#scan(pid);
        },
      },
    );
    const registry = this.#registry;
    const refreshPrograms = () => {
      const attached = registry.attachedCount;
      for (const name of [...Object.values(TLS_ENTRY_PROGRAMS), TLS_RETURN_PROGRAM]) {
        const p = programs.get(name);
        if (!p) continue;
        p.attached = attached > 0;
        p.reason = attached > 0 ? undefined : "attached by its set to TLS libraries found at run time: none yet";
        if (p.reason === undefined) delete p.reason;
      }
    };
    this.#refreshPrograms = refreshPrograms;
    this.#core.setTlsView(() => registry.view());
    this.#unsubscribe = this.#core.processes.subscribe((e) => this.#onProcess(e));
    void this.#scanAll();
    this.#rescanTimer = setInterval(() => {
      if (!this.#scanning) void this.#scanAll();
    }, RESCAN_INTERVAL_MS);
    this.#rescanTimer.unref?.();
  }

  #refreshPrograms: () => void = () => {};

  async #scanAll(): Promise<void> {
    this.#scanning = true;
    try {
      const pids = this.#source.pids();
      for (let i = 0; i < pids.length; i++) {
        if (!this.#registry) return;
        this.#scan(pids[i]!);
        if (i % SCAN_SLICE_PROCESSES === SCAN_SLICE_PROCESSES - 1) await new Promise<void>((r) => setImmediate(r));
      }
      // Processes held whose exit went unseen (lost events) are scanned too: a gone one releases its targets.
      for (const pid of this.#registry?.pids() ?? []) if (!pids.includes(pid)) this.#scan(pid);
    } finally {
      this.#scanning = false;
    }
  }

  #scan(pid: number): void {
    const registry = this.#registry;
    if (!registry) return;
    const before = registry.counters.attaches + registry.counters.failures;
    const started = performance.now();
    try {
      registry.scan(pid);
    } catch (e) {
      this.#host?.logger.warn("TLS target scan failed", { pid, error: (e as Error).message });
    }
    this.#syncTgid(pid, registry.holdsAttached(pid));
    if (registry.counters.attaches + registry.counters.failures !== before) {
      this.#refreshPrograms();
      for (const t of registry.view()) {
        if (t.pids.includes(pid) && t.state !== "attached") this.#host?.logger.warn("TLS library not traced", { path: t.path, state: t.state, reason: t.reason, pid });
      }
      // How long the scan and the attaches held the event loop (the ring buffers wait for it).
      this.#host?.logger.info("TLS libraries probed", { attached: registry.attachedCount, pid, ms: Math.round(performance.now() - started) });
    }
  }

  #onProcess(e: ProcessEvent): void {
    if (!this.#registry) return;
    if (e.kind === "exit") {
      for (const t of this.#pendingScans.get(e.pid) ?? []) clearTimeout(t);
      this.#pendingScans.delete(e.pid);
      this.#syncTgid(e.pid, false);
      // Only a process that mapped a probed library can have TLS connections to close.
      if (this.#registry.forget(e.pid)) {
        this.#refreshPrograms();
        this.#sink.tlsProcessExited(e.pid, e.timestampNs, this.#caughtUp);
      }
      return;
    }
    if (e.kind !== "exec" || this.#pendingScans.size >= MAX_PENDING_EXEC_SCANS) return;
    for (const t of this.#pendingScans.get(e.pid) ?? []) clearTimeout(t);
    const timers = EXEC_SCAN_DELAYS_MS.map((ms, i) =>
      setTimeout(() => {
        if (i === EXEC_SCAN_DELAYS_MS.length - 1) this.#pendingScans.delete(e.pid);
        this.#scan(e.pid);
      }, ms),
    );
    for (const t of timers) t.unref?.();
    this.#pendingScans.set(e.pid, timers);
  }

  /**
   * Keeps `tls_tgids` (the processes whose threads' socket reads the kernel follows for memory BIOs) equal to the
   * processes mapping an attached target. A failed write is logged: those processes' first reads carry no addresses.
   */
  #syncTgid(pid: number, traced: boolean): void {
    if (traced === this.#tgids.has(pid)) return;
    const map = this.#set?.object.map("tls_tgids");
    if (!map) return;
    try {
      if (traced) {
        map.updateU32Key?.(pid, Uint8Array.of(1));
        this.#tgids.add(pid);
      } else {
        map.delete?.(new Uint8Array(new Uint32Array([pid]).buffer));
        this.#tgids.delete(pid);
      }
    } catch (e) {
      this.#host?.logger.warn("updating tls_tgids failed", { pid, error: (e as Error).message });
    }
  }

  #detached(): void {
    this.#tgids.clear();
    this.#pollStats();
    if (this.#statsTimer) clearInterval(this.#statsTimer);
    this.#statsTimer = undefined;
    this.#set = undefined;
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
    if (this.#rescanTimer) clearInterval(this.#rescanTimer);
    this.#rescanTimer = undefined;
    for (const timers of this.#pendingScans.values()) for (const t of timers) clearTimeout(t);
    this.#pendingScans.clear();
    this.#core.setTlsView(undefined);
    this.#registry?.close();
    this.#registry = undefined;
    this.#refreshPrograms = () => {};
  }

  async start(host: ComponentHost): Promise<void> {
    this.#host = host;
    await this.#inner.start(host);
  }

  async shutdown(deadline: AbortSignal): Promise<void> {
    await this.#inner.shutdown(deadline);
  }

  async reload(next: Config, previous: Config): Promise<void> {
    const a = networkOf(previous);
    const b = networkOf(next);
    this.#maxTargets = b.max_tls_libraries;
    // A new bound needs the targets attached again; RED counting is a constant of the kernel side. A new budget
    // (exchanges, HTTP/2 calls) is set in the running set: a new set would miss what runs while it loads.
    const rebuild = tlsEnabled(previous) !== tlsEnabled(next) || a.max_tls_libraries !== b.max_tls_libraries || tlsRedCounted(previous) !== tlsRedCounted(next) || configTlsSocketCallsInNetworkSet(a) !== configTlsSocketCallsInNetworkSet(b);
    this.#inner = await reloadSet(this.#inner, rebuild, () => this.#newInner(next), this.#host, next, previous);
    if (!rebuild) this.#inner.setVariables(tlsLimits(kernelExchangesPerSecond(b), b.http2_records_per_second));
  }
}
