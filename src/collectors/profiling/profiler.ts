/**
 * Component `collector/profiling`: loads the `profile` program set through the eBPF core's generic loader,
 * drains the in-kernel counts and stacks every 2 seconds into the period's totals, and every
 * `agent.profiling.interval` symbolizes the stacks and submits one OTLP profile per process (also written as
 * pprof when `pprof_dir` is set). Publishes the
 * `profiling` status view. No readiness check: profiling trouble never makes the agent unready.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { AgentContext } from "../../agent/context";
import type { Config } from "../../config/schema";
import { durationMs } from "../../config/units";
import { loadProgramSet, type EbpfCore, type LoadedSet, type ProgramSetSpec } from "../../ebpf";
import type { ProfileFrame, ProfileItem, ProfileSample, Scope } from "../../export/model";
import type { Attributes } from "../../export/types";
import type { Component, ComponentHost } from "../../lifecycle/component";
import { VIEWS, type ProfilingView } from "../../status/model";
import type { BpfMapApi } from "../../../ffi/types";
import { decodeCount, decodeProfileKey, decodeStack, decodeUserStack, NO_STACK, PROFILE_ERRORS, type ProfileKey } from "./decode";
import { encodePprof } from "./pprof";
import { Symbolizer } from "./symbolizer";

export const PROFILE_SET_NAME = "profile";
export const PROFILING_SCOPE: Scope = { name: "svc-agent/profiling" };
const COUNTS_MAP = "profile_counts";
const STACKS_MAP = "profile_stacks";
const ERRORS_MAP = "profile_errors";
/** Upper bound of keys read per period (the maps' max_entries). */
const MAX_KEYS = 16_384;
const NS_PER_MS = 1_000_000n;
/**
 * How often the kernel maps are drained into the period's totals. Draining often keeps few stacks in the stack
 * map, so that new stacks rarely collide with old ones in its hash (a collision loses the sample's stack).
 */
const DRAIN_INTERVAL_MS = 2000;
/** Every this many drains all stack ids no count refers to are swept (others are freed as soon as read). */
const FULL_SWEEP_EVERY_DRAINS = 10;
const NS_PER_S = 1_000_000_000;

/** The profile program set at a sample rate (samples per second per CPU); `targetPid` 0 profiles every process. */
export function profileSetSpec(sampleRateHz: number, targetPid = 0): ProgramSetSpec {
  return {
    name: PROFILE_SET_NAME,
    object: "profile",
    programs: [{ name: "profile_cpu", attach: { kind: "perf_event", event: "cpu-clock", frequencyHz: sampleRateHz }, required: true }],
    ringBuffers: [],
    constants: { target_pid: targetPid },
  };
}

export interface ProfilerOptions {
  /** The eBPF core (prepare, embedded objects, the ebpf status view). */
  core: EbpfCore;
  symbolizer?: Symbolizer;
  /** Profile only this process, overriding agent.profiling.pid (tests); 0: every process. */
  targetPid?: number;
  /** Called after each period with the items built (tests, benchmarks). */
  onPeriod?: (items: ProfileItem[]) => void;
}

/** What one drain read from the kernel. */
interface DrainedCounts {
  rows: Array<{ key: ProfileKey; count: number }>;
  stackIds: Set<number>;
}

/** Samples of one (thread name, kernel stack, user stack) of a process in the current period. */
interface Row {
  comm: string;
  /** Addresses, leaf first; undefined when there is no stack of that kind (see the stack id). */
  kernel: bigint[] | undefined;
  user: number[] | undefined;
  /** True when a stack was taken but is missing (collision or map full in the kernel). */
  lost: boolean;
  count: number;
}

export class ProfilingCollector implements Component {
  readonly id = "collector/profiling";
  readonly #ctx: AgentContext;
  readonly #opts: ProfilerOptions;
  readonly #symbolizer: Symbolizer;
  #host: ComponentHost | undefined;
  #set: LoadedSet | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;
  /** The current period's samples: pid -> row key -> row. */
  #period = new Map<number, Map<string, Row>>();
  #drainTimer: ReturnType<typeof setInterval> | undefined;
  #drains = 0;
  #endTask: (() => void) | undefined;
  #loading: Promise<void> | undefined;
  #generation = 0;
  #periodStartNs = 0n;
  #config: Config;
  #profilesCollected = 0;
  #errorsSeen = [0n, 0n, 0n];
  /** Samples lost in the kernel during the current period, by PROFILE_ERRORS index. */
  #periodLosses = [0, 0, 0];
  /** The last period's items; its pprof is encoded on demand (encoding costs as much as the whole read). */
  #latestItems: ProfileItem[] = [];
  #latestPprof: Uint8Array | undefined;
  readonly #resources = new Map<number, { comm: string; attributes: Attributes }>();
  readonly #view = (): ProfilingView => ({
    enabled: this.#config.agent.profiling.enabled,
    sample_rate: this.#config.agent.profiling.sample_rate,
    profiles_collected: this.#profilesCollected,
  });

  constructor(ctx: AgentContext, options: ProfilerOptions) {
    this.#ctx = ctx;
    this.#opts = options;
    this.#symbolizer = options.symbolizer ?? new Symbolizer();
    this.#config = ctx.config;
  }

  /** Samples the kernel could not count or take a stack for, since start (from profile_errors). */
  get kernelLosses(): { countsFull: number; userStack: number; kernelStack: number } {
    const [countsFull, userStack, kernelStack] = this.#errorsSeen.map(Number) as [number, number, number];
    return { countsFull, userStack, kernelStack };
  }

  /** Profiles built since start. */
  get profilesCollected(): number {
    return this.#profilesCollected;
  }

  /** The last period's profile in pprof format (gzipped profile.proto), for operators; undefined before the first. */
  latestPprof(): Uint8Array | undefined {
    if (!this.#latestPprof && this.#latestItems.length > 0) this.#latestPprof = encodePprof(this.#latestItems);
    return this.#latestPprof;
  }

  async start(host: ComponentHost): Promise<void> {
    this.#host = host;
    this.#ctx.status.provide(VIEWS.profiling, this.#view);
    this.#begin(this.#ctx.config);
  }

  #begin(config: Config): void {
    const host = this.#host!;
    this.#config = config;
    if (!config.agent.profiling.enabled) {
      host.report("disabled");
      return;
    }
    if (!config.agent.ebpf.enabled) {
      host.report("permanent_error", "agent.profiling.enabled needs agent.ebpf.enabled");
      return;
    }
    host.report("starting");
    const generation = ++this.#generation;
    this.#loading = this.#ctx.tasks.track("collector/profiling load", () => this.#load(host, config, generation));
  }

  async #load(host: ComponentHost, config: Config, generation: number): Promise<void> {
    const core = this.#opts.core;
    const prepared = await core.prepare();
    if (generation !== this.#generation) return;
    if (!prepared.ok) {
      host.report("permanent_error", prepared.reason);
      return;
    }
    const spec = profileSetSpec(config.agent.profiling.sample_rate, this.#opts.targetPid ?? config.agent.profiling.pid);
    const outcome = await loadProgramSet(spec, {
      runtime: prepared.runtime,
      probes: prepared.probes,
      objectBytes: (n) => core.objectBytes(n),
      ringbufSizeBytes: core.ringbufSizeBytes(),
      useRingbuf: true,
      onVerifierLog: (program, log) => core.verifierLog(PROFILE_SET_NAME, program, log),
    });
    if (generation !== this.#generation) {
      if (outcome.ok) outcome.set.close();
      return;
    }
    if (!outcome.ok) {
      core.record(PROFILE_SET_NAME, { programs: outcome.programs, loaded: undefined, pumps: [] });
      host.report("permanent_error", outcome.reason);
      return;
    }
    this.#set = outcome.set;
    core.record(PROFILE_SET_NAME, { programs: outcome.set.programs, loaded: outcome.set as LoadedSet<unknown>, pumps: [] });
    this.#periodStartNs = nowNs();
    this.#endTask = this.#ctx.tasks.begin("collector/profiling reader");
    const intervalMs = durationMs(config.agent.profiling.interval);
    this.#timer = setInterval(() => this.collect(), intervalMs);
    if (intervalMs > DRAIN_INTERVAL_MS) this.#drainTimer = setInterval(() => this.drain(), DRAIN_INTERVAL_MS);
    host.logger.info("CPU profiling attached", { sample_rate: config.agent.profiling.sample_rate, interval: config.agent.profiling.interval });
    host.report("ok");
  }

  /** Moves the kernel's counts and stacks into the current period's totals and clears them in the kernel. Exposed for tests. */
  drain(): boolean {
    const set = this.#set;
    if (!set) return false;
    try {
      const counts = set.object.map(COUNTS_MAP)!;
      const stacks = set.object.map(STACKS_MAP)!;
      const drained = readCounts(counts);
      const raw = readStacks(stacks, drained.stackIds);
      if (++this.#drains % FULL_SWEEP_EVERY_DRAINS === 0) clearUnreferencedStacks(counts, stacks);
      const kernelStacks = new Map<number, bigint[]>();
      const userStacks = new Map<number, number[]>();
      for (const { key, count } of drained.rows) {
        let kernel: bigint[] | undefined;
        let user: number[] | undefined;
        if (key.kernelStackId >= 0 && raw.has(key.kernelStackId)) {
          kernel = kernelStacks.get(key.kernelStackId);
          if (!kernel) kernelStacks.set(key.kernelStackId, (kernel = decodeStack(raw.get(key.kernelStackId)!)));
        }
        if (key.userStackId >= 0 && raw.has(key.userStackId)) {
          user = userStacks.get(key.userStackId);
          if (!user) userStacks.set(key.userStackId, (user = decodeUserStack(raw.get(key.userStackId)!)));
        }
        const lost = (key.kernelStackId >= 0 && !kernel) || (key.userStackId >= 0 && !user) || (key.kernelStackId !== NO_STACK && key.kernelStackId < 0) || (key.userStackId !== NO_STACK && key.userStackId < 0);
        const id = `${key.comm}\0${kernel ? kernel.join(",") : ""}\0${user ? user.join(",") : ""}\0${lost ? 1 : 0}`;
        let rows = this.#period.get(key.pid);
        if (!rows) this.#period.set(key.pid, (rows = new Map()));
        const row = rows.get(id);
        if (row) row.count += count;
        else rows.set(id, { comm: key.comm, kernel, user, lost, count });
      }
      this.#checkErrors(set.object.map(ERRORS_MAP));
      return true;
    } catch (e) {
      this.#host?.report("recoverable_error", `reading profile maps failed: ${(e as Error).message}`);
      return false;
    }
  }

  /** Ends the current period: drains the kernel maps, builds one profile per process and submits them. Returns them. Exposed for tests. */
  collect(): ProfileItem[] {
    if (!this.#set) return [];
    const ok = this.drain();
    const end = nowNs();
    const start = this.#periodStartNs;
    this.#periodStartNs = end;
    const period = this.#period;
    this.#period = new Map();
    const [countsFull, userStack, kernelStack] = this.#periodLosses as [number, number, number];
    this.#periodLosses = [0, 0, 0];
    if (countsFull + userStack + kernelStack > 0) {
      // A full count map means lost samples worth an operator's attention; stack collisions are routine.
      this.#host?.logger.write(countsFull > 0 ? "warn" : "debug", "profile samples lost in the kernel this period", { counts_full: countsFull, user_stack: userStack, kernel_stack: kernelStack });
    }
    if (!ok) return [];
    const items = this.#build(period, start, end);
    if (items.length > 0) {
      this.#ctx.pipeline.submit("profiles", items);
      this.#profilesCollected += items.length;
      this.#pprof(items);
    }
    this.#host?.report("ok");
    this.#opts.onPeriod?.(items);
    return items;
  }

  #build(period: Map<number, Map<string, Row>>, start: bigint, end: bigint): ProfileItem[] {
    const sym = this.#symbolizer;
    sym.beginPeriod();
    const rate = this.#config.agent.profiling.sample_rate;
    const items: ProfileItem[] = [];
    for (const [pid, rows] of period) {
      const samples: ProfileSample[] = [];
      let first: Row | undefined;
      for (const row of rows.values()) {
        first ??= row;
        const stack: ProfileFrame[] = [];
        if (row.kernel) for (const a of row.kernel) stack.push(sym.kernelFrame(a));
        if (row.user) stack.push(...sym.userFrames(pid, row.user));
        if (stack.length === 0) stack.push({ function: row.lost ? "[stack lost]" : "[no stack]" });
        samples.push({ stack, value: row.count, attributes: { "thread.name": row.comm } });
      }
      if (!first) continue;
      items.push({
        scope: PROFILING_SCOPE,
        resource: this.#resource(pid, first.comm),
        sampleType: { type: "samples", unit: "count" },
        periodType: { type: "cpu", unit: "nanoseconds" },
        period: Math.round(NS_PER_S / rate),
        timeUnixNano: start,
        durationNanos: end - start,
        samples,
      });
    }
    for (const pid of this.#resources.keys()) {
      if (period.has(pid) || existsSync(`/proc/${pid}`)) continue;
      this.#resources.delete(pid);
      sym.forgetPid(pid);
    }
    return items;
  }

  /** Resource attributes of a process (one object per process, reused: the pipeline caches by identity). */
  #resource(pid: number, threadComm: string): Attributes {
    let comm = threadComm;
    try {
      comm = readFileSync(`/proc/${pid}/comm`, "utf8").trim() || threadComm;
    } catch {
      // The process ended: keep the thread's name.
    }
    const known = this.#resources.get(pid);
    if (known && known.comm === comm) return known.attributes;
    const attributes: Attributes = { ...(this.#ctx.workloads.forPid(pid) ?? {}), "process.pid": pid, "process.executable.name": comm };
    this.#resources.set(pid, { comm, attributes });
    return attributes;
  }

  #checkErrors(map: BpfMapApi | undefined): void {
    if (!map) return;
    for (const i of [PROFILE_ERRORS.countsFull, PROFILE_ERRORS.userStack, PROFILE_ERRORS.kernelStack]) {
      const total = map.sumPerCpuU64(i);
      this.#periodLosses[i]! += Number(total - this.#errorsSeen[i]!);
      this.#errorsSeen[i] = total;
    }
  }

  #pprof(items: ProfileItem[]): void {
    const c = this.#config.agent.profiling;
    this.#latestItems = items;
    this.#latestPprof = undefined;
    if (!c.pprof_dir) return;
    try {
      this.#latestPprof = encodePprof(items);
      mkdirSync(c.pprof_dir, { recursive: true });
      const name = `cpu-${new Date().toISOString().replace(/[:.]/g, "-")}.pb.gz`;
      const tmp = join(c.pprof_dir, `.${name}.tmp`);
      writeFileSync(tmp, this.#latestPprof);
      renameSync(tmp, join(c.pprof_dir, name));
      const files = readdirSync(c.pprof_dir).filter((f) => /^cpu-.*\.pb\.gz$/.test(f)).sort();
      for (const old of files.slice(0, Math.max(0, files.length - c.pprof_keep))) rmSync(join(c.pprof_dir, old), { force: true });
    } catch (e) {
      this.#host?.logger.warn("writing pprof profile failed", { dir: c.pprof_dir, error: (e as Error).message });
    }
  }

  async #stop(final: boolean): Promise<void> {
    this.#generation++;
    await this.#loading;
    this.#loading = undefined;
    if (this.#timer) clearInterval(this.#timer);
    if (this.#drainTimer) clearInterval(this.#drainTimer);
    this.#timer = undefined;
    this.#drainTimer = undefined;
    if (final && this.#set) this.collect();
    this.#endTask?.();
    this.#endTask = undefined;
    if (this.#set) {
      this.#opts.core.remove(PROFILE_SET_NAME);
      this.#set.close();
      this.#set = undefined;
    }
  }

  async shutdown(): Promise<void> {
    await this.#stop(true);
    this.#ctx.status.withdraw(VIEWS.profiling, this.#view);
  }

  async reload(next: Config, previous: Config): Promise<void> {
    const changed = JSON.stringify(next.agent.profiling) !== JSON.stringify(previous.agent.profiling) || next.agent.ebpf.enabled !== previous.agent.ebpf.enabled;
    this.#config = next;
    if (!changed || !this.#host) return;
    await this.#stop(true);
    this.#begin(next);
  }
}

function nowNs(): bigint {
  return BigInt(Date.now()) * NS_PER_MS;
}

function needs<K extends "keys" | "lookup" | "delete">(map: BpfMapApi, method: K): NonNullable<BpfMapApi[K]> {
  const fn = map[method];
  if (!fn) throw new Error(`map ${map.name}: the native layer lacks ${method}()`);
  return fn.bind(map) as NonNullable<BpfMapApi[K]>;
}

/** Takes every count (lookup, then delete: a sample landing between the two is lost, a window of microseconds). */
function readCounts(counts: BpfMapApi): DrainedCounts {
  const keys = needs(counts, "keys");
  const lookup = needs(counts, "lookup");
  const del = needs(counts, "delete");
  const rows: Array<{ key: ProfileKey; count: number }> = [];
  const stackIds = new Set<number>();
  for (const raw of keys(MAX_KEYS)) {
    const value = lookup(raw);
    del(raw);
    if (!value) continue;
    const key = decodeProfileKey(raw);
    const count = decodeCount(value);
    if (count === 0) continue;
    rows.push({ key, count });
    if (key.userStackId >= 0) stackIds.add(key.userStackId);
    if (key.kernelStackId >= 0) stackIds.add(key.kernelStackId);
  }
  return { rows, stackIds };
}

/** The raw values of the stack ids read, each deleted once read (a count created meanwhile that refers to one loses its stack: a window of microseconds). */
function readStacks(stacks: BpfMapApi, ids: Set<number>): Map<number, Uint8Array> {
  const del = needs(stacks, "delete");
  const out = new Map<number, Uint8Array>();
  const key = new Uint32Array(1);
  for (const id of ids) {
    const v = stacks.lookupU32Key(id);
    if (!v) continue;
    out.set(id, v);
    key[0] = id;
    del(new Uint8Array(key.buffer.slice(0)));
  }
  return out;
}

/** Frees every stack id no count refers to (ids whose counts were lost in the kernel would otherwise stay). */
function clearUnreferencedStacks(counts: BpfMapApi, stacks: BpfMapApi): void {
  const keep = new Set<number>();
  for (const raw of needs(counts, "keys")(MAX_KEYS)) {
    const k = decodeProfileKey(raw);
    keep.add(k.userStackId);
    keep.add(k.kernelStackId);
  }
  const del = needs(stacks, "delete");
  for (const raw of needs(stacks, "keys")(MAX_KEYS)) {
    const id = new DataView(raw.buffer, raw.byteOffset, 4).getUint32(0, true);
    if (!keep.has(id)) del(raw);
  }
}
