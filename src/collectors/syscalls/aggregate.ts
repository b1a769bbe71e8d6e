/**
 * Turns snapshots of the kernel's cumulative per-(process, syscall) statistics into delta metric points:
 * the `topProcesses` processes with the most calls in the interval get their own series, every other process
 * is summed into one `other` group (resource: unknown_service). Each point carries its process's workload resource. Pure: the caller reads the map, names processes and stamps times.
 *
 * The kernel moves the entries of a process that ended into per-syscall totals (`exited_stats`); what those
 * totals grew by in an interval, less what was already exported from the moved entries, is counted in the
 * `other` group, so a short-lived process's calls are neither lost nor counted twice.
 */
import type { Attributes } from "../../export/types";
import { Temporality, type MetricPointItem, type Scope } from "../../export/model";
import { UNKNOWN_WORKLOAD } from "../../workloads/identity";
import { SC_BOUNDS_SECONDS, SC_BUCKETS, type SyscallKey, type SyscallStats } from "./decoders";

export const METRIC_COUNT = "process.syscall.count";
export const METRIC_ERRORS = "process.syscall.errors";
export const METRIC_DURATION = "process.syscall.duration";
/** Value of `process.executable.name` for the group of processes outside the top N. */
export const OTHER_GROUP = "other";

export interface SyscallEntry {
  key: SyscallKey;
  stats: SyscallStats;
}

export interface AggregateOptions {
  topProcesses: number;
  /** The name of syscall `nr`. */
  syscallName(nr: number): string;
  /** Attributes of process `pid` (at least process.executable.name). */
  processAttributes(pid: number): Attributes;
  /** The resource of process `pid`'s points (its workload; src/workloads), undefined for the agent itself. */
  processResource?(pid: number): Attributes | undefined;
  startTimeUnixNano: bigint;
  timeUnixNano: bigint;
  scope?: Scope;
}

interface Delta {
  count: number;
  errors: number;
  totalNs: number;
  buckets: number[];
}

const keyOf = (k: SyscallKey) => `${k.tgid}:${k.nr}`;
const zeroDelta = (): Delta => ({ count: 0, errors: 0, totalNs: 0, buckets: new Array<number>(SC_BUCKETS).fill(0) });

function sub(a: SyscallStats, b: SyscallStats | undefined): Delta {
  if (!b || a.count < b.count) return { count: a.count, errors: a.errors, totalNs: a.totalNs, buckets: [...a.buckets] };
  return { count: a.count - b.count, errors: a.errors - b.errors, totalNs: a.totalNs - b.totalNs, buckets: a.buckets.map((v, i) => v - (b.buckets[i] ?? 0)) };
}

function add(into: Delta, d: Delta | SyscallStats): void {
  into.count += d.count;
  into.errors += d.errors;
  into.totalNs += d.totalNs;
  for (let i = 0; i < SC_BUCKETS; i++) into.buckets[i]! += d.buckets[i] ?? 0;
}

/** Remembers the previous snapshot so that each call exports what happened since. Not thread-safe. */
export class SyscallAggregator {
  #previous = new Map<string, SyscallStats>();
  /** The previous read of the exited processes' totals, per syscall number. */
  #previousExited = new Map<number, SyscallStats>();
  /**
   * Per syscall number, what was already exported of entries the kernel moved but the totals read did not show
   * yet (the move fell between the two reads of a collection): subtracted from the totals' next growth.
   */
  #debt = new Map<number, Delta>();

  /** Forgets an entry the caller deleted from the map, so that a reused pid starts from zero. */
  forget(key: SyscallKey): void {
    this.#previous.delete(keyOf(key));
  }

  /**
   * Points for the interval ending with `entries` (the whole map now) and `exited` (the kernel's cumulative
   * totals of ended processes, key.tgid ignored, one entry per syscall number; read before `entries`). An entry
   * absent from `entries` that was not forgotten (or whose count went down: its pid was reused) was moved into
   * `exited` by the kernel: its last read is subtracted from the totals' growth, now or, when the move is not in
   * the totals read yet, from their next growth, so that every call is counted once.
   */
  collect(entries: readonly SyscallEntry[], o: AggregateOptions, exited: readonly SyscallEntry[] = []): MetricPointItem[] {
    const perPid = new Map<number, Map<number, Delta>>();
    const next = new Map<string, SyscallStats>();
    const moved = new Map<number, Delta>();
    const addMoved = (nr: number, stats: SyscallStats) => {
      const acc = moved.get(nr) ?? zeroDelta();
      add(acc, stats);
      moved.set(nr, acc);
    };
    for (const e of entries) {
      const k = keyOf(e.key);
      next.set(k, e.stats);
      const before = this.#previous.get(k);
      if (before && e.stats.count < before.count) addMoved(e.key.nr, before);
      const d = sub(e.stats, before);
      if (d.count <= 0) continue;
      let m = perPid.get(e.key.tgid);
      if (!m) perPid.set(e.key.tgid, (m = new Map()));
      m.set(e.key.nr, d);
    }
    for (const [k, stats] of this.#previous) {
      if (!next.has(k)) addMoved(Number(k.slice(k.indexOf(":") + 1)), stats);
    }
    this.#previous = next;
    for (const [nr, m] of moved) {
      const acc = this.#debt.get(nr) ?? zeroDelta();
      add(acc, m);
      this.#debt.set(nr, acc);
    }
    const ended = new Map<number, Delta>();
    const nextExited = new Map<number, SyscallStats>();
    for (const e of exited) nextExited.set(e.key.nr, e.stats);
    for (const [nr, stats] of nextExited) {
      const d = sub(stats, this.#previousExited.get(nr));
      const debt = this.#debt.get(nr);
      if (debt) {
        // Field by field: what the growth cannot pay now stays owed.
        const pay = (have: number, owed: number): [number, number] => (have >= owed ? [have - owed, 0] : [0, owed - have]);
        [d.count, debt.count] = pay(d.count, debt.count);
        [d.errors, debt.errors] = pay(d.errors, debt.errors);
        [d.totalNs, debt.totalNs] = pay(d.totalNs, debt.totalNs);
        for (let i = 0; i < SC_BUCKETS; i++) [d.buckets[i], debt.buckets[i]] = pay(d.buckets[i]!, debt.buckets[i]!);
        if (debt.count === 0 && debt.errors === 0 && debt.totalNs === 0 && debt.buckets.every((v) => v === 0)) this.#debt.delete(nr);
      }
      if (d.count > 0) ended.set(nr, d);
    }
    this.#previousExited = nextExited;

    const totals = [...perPid.entries()].map(([pid, m]) => ({ pid, total: [...m.values()].reduce((s, d) => s + d.count, 0) }));
    totals.sort((a, b) => b.total - a.total || a.pid - b.pid);
    const top = new Set(totals.slice(0, o.topProcesses).map((t) => t.pid));
    const groups: Array<{ attrs: Attributes; resource: Attributes | undefined; perNr: Map<number, Delta> }> = [];
    const other = ended;
    for (const [pid, m] of perPid) {
      if (top.has(pid)) {
        groups.push({ attrs: { ...o.processAttributes(pid), "process.pid": pid }, resource: o.processResource?.(pid), perNr: m });
        continue;
      }
      for (const [nr, d] of m) {
        const acc = other.get(nr) ?? zeroDelta();
        add(acc, d);
        other.set(nr, acc);
      }
    }
    if (other.size > 0) groups.push({ attrs: { "process.executable.name": OTHER_GROUP }, resource: o.processResource ? UNKNOWN_WORKLOAD : undefined, perNr: other });

    const out: MetricPointItem[] = [];
    const common = { startTimeUnixNano: o.startTimeUnixNano, timeUnixNano: o.timeUnixNano, ...(o.scope ? { scope: o.scope } : {}) };
    for (const g of groups) {
      const of = g.resource ? { resource: g.resource } : {};
      for (const [nr, d] of g.perNr) {
        const attributes: Attributes = { ...g.attrs, "syscall.name": o.syscallName(nr) };
        out.push({ type: "sum", name: METRIC_COUNT, unit: "{call}", description: "System calls made.", value: d.count, integer: true, temporality: Temporality.DELTA, monotonic: true, attributes, ...common, ...of });
        out.push({ type: "sum", name: METRIC_ERRORS, unit: "{call}", description: "System calls that returned an error.", value: d.errors, integer: true, temporality: Temporality.DELTA, monotonic: true, attributes, ...common, ...of });
        out.push({
          type: "histogram",
          name: METRIC_DURATION,
          unit: "s",
          description: "Time from syscall entry to exit.",
          temporality: Temporality.DELTA,
          count: d.buckets.reduce((s, v) => s + v, 0),
          sum: d.totalNs / 1e9,
          bucketCounts: d.buckets,
          explicitBounds: [...SC_BOUNDS_SECONDS],
          attributes,
          ...common,
          ...of,
        });
      }
    }
    return out;
  }
}
