/**
 * Component `ebpf/syscalls` (readiness `ebpf`): runs the `syscalls` program set and every `interval` reads
 * the kernel's per-(process, syscall) statistics, exports the interval's deltas for the top processes plus
 * `other`. The kernel moves the entries of processes that end having made fewer than SC_FOLD_BELOW_CALLS
 * calls into per-syscall totals (counted in `other`); the entries of the other ended processes, and of those
 * the kernel missed, are deleted here after their last values were exported under their pid.
 * Calls the kernel could not count (a map full) are counted in `counters.dropped` and in
 * `<ns>_syscalls_dropped_total{reason}`.
 */
import { existsSync } from "node:fs";
import type { AgentContext } from "../context";
import type { Config } from "../../config/schema";
import { msOf } from "../../config/units";
import type { EbpfCore } from "../../ebpf/core";
import { EbpfSetComponent, reloadSet } from "../../ebpf/component";
import type { LoadedSet } from "../../ebpf/loader";
import type { Component, ComponentHost } from "../../lifecycle/component";
import { KernelClock } from "../network/clock";
import { ProcessLabeler } from "../network/labels";
import { ownKernelPid } from "../../ebpf/self";
import { SyscallAggregator, type SyscallEntry } from "./aggregate";
import { decodeSyscallKey, decodeSyscallStats, encodeSyscallKey, SC_DROP_REASONS, SC_KEY_BYTES, SC_MAX_NR, SC_STATS_BYTES } from "./decoders";
import { hasSyscallTable, syscallName } from "./names";
import { syscallSetSpec } from "./spec";
import { syscallsOf, type SyscallsConfig } from "./config";

const SCOPE = { name: "svc-agent/ebpf/syscalls" };


export interface SyscallCollectorOptions {
  selfPid?: number;
  arch?: string;
  /** Whether a process still runs (default: /proc/<pid> exists). */
  alive?(pid: number): boolean;
}

export class SyscallCollector implements Component {
  readonly id = "ebpf/syscalls";
  readonly readiness = "ebpf" as const;
  readonly #ctx: AgentContext;
  readonly #core: EbpfCore;
  readonly #selfPid: number;
  readonly #arch: string;
  readonly #alive: (pid: number) => boolean;
  #inner: EbpfSetComponent<never>;
  #set: LoadedSet<never> | undefined;
  #cfg: SyscallsConfig;
  #host: ComponentHost | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;
  readonly #clock = new KernelClock();
  readonly #labeler: ProcessLabeler;
  #aggregator = new SyscallAggregator();
  #lastExportNs: bigint | undefined;
  #droppedSeen: bigint[] = SC_DROP_REASONS.map(() => 0n);
  #removeFlushSource: (() => void) | undefined;
  /** Since start: exports, points exported, entries user space deleted, calls not counted per reason. */
  readonly counters = { exports: 0, points: 0, deletedEntries: 0, dropped: Object.fromEntries(SC_DROP_REASONS.map((r) => [r, 0])) as Record<(typeof SC_DROP_REASONS)[number], number> };

  constructor(ctx: AgentContext, core: EbpfCore, o: SyscallCollectorOptions = {}) {
    this.#ctx = ctx;
    this.#core = core;
    this.#selfPid = o.selfPid ?? ownKernelPid();
    this.#arch = o.arch ?? process.arch;
    this.#alive = o.alive ?? ((pid) => existsSync(`/proc/${pid}`));
    this.#cfg = syscallsOf(ctx.config);
    this.#labeler = new ProcessLabeler(core.processes, ctx.workloads);
    this.#inner = this.#newInner(this.#cfg);
  }

  #newInner(c: SyscallsConfig): EbpfSetComponent<never> {
    return new EbpfSetComponent<never>(this.#core, {
      spec: syscallSetSpec({ selfPid: this.#selfPid, maxEntries: c.max_entries }),
      onEvent: () => undefined,
      onAttached: (set) => {
        this.#set = set;
        this.#aggregator = new SyscallAggregator();
        this.#lastExportNs = this.#clock.nowEpochNs();
        this.#droppedSeen = SC_DROP_REASONS.map(() => 0n);
      },
      onDetached: () => {
        this.collect();
        this.#set = undefined;
      },
      enabled: (config) => syscallsOf(config).enabled,
    });
  }

  #name(nr: number): string {
    return hasSyscallTable(this.#arch) ? syscallName(this.#arch, nr) : `syscall_${nr}`;
  }

  /** Reads the map, exports the interval's points, forgets ended processes; returns the points exported. */
  collect(): number {
    const map = this.#set?.object.map("syscall_stats");
    if (!map?.keys || !map.lookup || !map.delete) return 0;
    // The totals of ended processes first: an entry the kernel moves meanwhile is then missing from both reads
    // (counted when the totals show it) rather than in both.
    const exited: SyscallEntry[] = [];
    const exitedMap = this.#set?.object.map("exited_stats");
    if (exitedMap?.lookupU32Key) {
      for (let nr = 0; nr < SC_MAX_NR; nr++) {
        const value = exitedMap.lookupU32Key(nr);
        if (!value || value.length < SC_STATS_BYTES) continue;
        const stats = decodeSyscallStats(new DataView(value.buffer, value.byteOffset, value.byteLength));
        if (stats.count > 0) exited.push({ key: { tgid: 0, nr }, stats });
      }
    }
    const entries: SyscallEntry[] = [];
    for (const key of map.keys(map.maxEntries)) {
      const value = map.lookup(key);
      if (!value || key.length < SC_KEY_BYTES || value.length < SC_STATS_BYTES) continue;
      entries.push({
        key: decodeSyscallKey(new DataView(key.buffer, key.byteOffset, key.byteLength)),
        stats: decodeSyscallStats(new DataView(value.buffer, value.byteOffset, value.byteLength)),
      });
    }
    const now = this.#clock.nowEpochNs();
    const points = this.#aggregator.collect(entries, {
      topProcesses: this.#cfg.top_processes,
      syscallName: (nr) => this.#name(nr),
      processAttributes: (pid) => this.#labeler.describe(pid, "").attributes,
      processResource: (pid) => this.#labeler.describe(pid, "").resource,
      startTimeUnixNano: this.#lastExportNs ?? now,
      timeUnixNano: now,
      scope: SCOPE,
    }, exited);
    this.#lastExportNs = now;
    if (points.length > 0) this.#ctx.pipeline.submit("metrics", points);
    this.counters.exports++;
    this.counters.points += points.length;
    const gone = new Map<number, boolean>();
    for (const e of entries) {
      let dead = gone.get(e.key.tgid);
      if (dead === undefined) gone.set(e.key.tgid, (dead = !this.#alive(e.key.tgid)));
      if (!dead) continue;
      // When the kernel moved the entry first, the delete fails and the aggregator subtracts it from the totals.
      if (!map.delete(encodeSyscallKey(e.key))) continue;
      this.counters.deletedEntries++;
      this.#aggregator.forget(e.key);
    }
    this.#pollDropped();
    return points.length;
  }

  /**
   * What the kernel maps hold now, keyed by process: the tgids of the `syscall_stats` entries, of the
   * in-flight calls and of the `proc_nrs` bitmaps (each tgid once per entry). Empty when the set is not loaded.
   */
  kernelEntries(): { stats: number[]; inflight: number[]; processes: number[] } {
    const tgids = (name: string, at: number) => {
      const m = this.#set?.object.map(name);
      if (!m?.keys) return [];
      return m.keys(m.maxEntries).map((k) => new DataView(k.buffer, k.byteOffset, k.byteLength).getUint32(at, true));
    };
    return { stats: tgids("syscall_stats", 0), inflight: tgids("inflight", 4), processes: tgids("proc_nrs", 0) };
  }

  #pollDropped(): void {
    const map = this.#set?.object.map("dropped");
    if (!map) return;
    SC_DROP_REASONS.forEach((reason, i) => {
      const d = map.sumPerCpuU64(i);
      const seen = this.#droppedSeen[i]!;
      if (d > seen) {
        const n = Number(d - seen);
        this.counters.dropped[reason] += n;
        this.#ctx.metrics.syscallsDropped.inc({ reason }, n);
        this.#host?.logger.warn("syscall statistics: calls not counted, a map is full", { reason, dropped: n, max_entries: this.#cfg.max_entries });
      }
      this.#droppedSeen[i] = d;
    });
  }

  #startTimer(): void {
    this.#stopTimer();
    this.#timer = setInterval(() => {
      try {
        this.collect();
      } catch (e) {
        this.#host?.logger.warn("reading syscall statistics failed", { error: (e as Error).message });
      }
    }, msOf(this.#cfg, "interval"));
    this.#timer.unref?.();
  }

  #stopTimer(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  async start(host: ComponentHost): Promise<void> {
    this.#host = host;
    await this.#inner.start(host);
    if (this.#cfg.enabled && this.#ctx.config.agent.ebpf.enabled) this.#startTimer();
    // A flush (POST /admin/flush) exports the statistics counted since the last interval.
    this.#removeFlushSource ??= this.#ctx.pipeline.addFlushSource?.(() => {
      if (this.#timer) this.collect();
    });
  }

  async shutdown(deadline: AbortSignal): Promise<void> {
    this.#removeFlushSource?.();
    this.#removeFlushSource = undefined;
    this.#stopTimer();
    await this.#inner.shutdown(deadline);
  }

  async reload(next: Config, previous: Config): Promise<void> {
    const a = syscallsOf(previous);
    const b = syscallsOf(next);
    this.#cfg = b;
    this.#inner = await reloadSet(this.#inner, a.max_entries !== b.max_entries && this.#host !== undefined, () => this.#newInner(b), this.#host, next, previous);
    if (b.enabled && next.agent.ebpf.enabled) this.#startTimer();
    else this.#stopTimer();
  }
}
