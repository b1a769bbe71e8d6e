/**
 * Component `collector/profiling`: loads the `profile` program set through the eBPF core's generic loader,
 * drains the in-kernel counts and stacks every 2 seconds into the period's totals, and every
 * `agent.profiling.interval` symbolizes the stacks and submits one OTLP profile per process (also written as
 * pprof when `pprof_dir` is set). Publishes the
 * `profiling` status view. No readiness check: profiling trouble never makes the agent unready.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { AgentContext } from "../context";
import type { Config } from "../../config/schema";
import { msOf } from "../../config/units";
import { loadProgramSet, type EbpfCore, type LoadedSet, type ProgramSetSpec } from "../../ebpf";
import type { ProfileFrame, ProfileItem, ProfileSample, Scope } from "../../export/model";
import type { Attributes } from "../../export/types";
import type { Component, ComponentHost } from "../../lifecycle/component";
import { PROFILING_STATUS, type ProfilingView } from "./status";
import type { BpfMapApi } from "../../../ffi/types";
import { decodeComm, decodeCount, decodeProfileKey, decodeStack, decodeUserStack, NO_STACK, PROFILE_ERRORS, PROFILE_KEY_BYTES } from "./decode";
import { encodePprof } from "./pprof";
import { Symbolizer } from "./symbolizer";
import { ownKernelPid } from "../../ebpf/self";
import { profilingOf } from "./config";

/** The agent's own pid: its profiles go under the agent's own resource. */
const SELF_PID = ownKernelPid();

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
/** Every this many drains all stack ids no count refers to and not cached are swept (counts lost in the kernel leave them). */
const FULL_SWEEP_EVERY_DRAINS = 10;
/**
 * A stack read from the kernel stays in the stack map (and decoded in `#stacks`) while counts keep referring to it:
 * its id keeps naming the same addresses until deleted, so a hot stack costs no syscall after its first read.
 * It is deleted (map and cache) once no count referred to it for this many drains.
 */
const STACK_KEEP_DRAINS = 3;
/** Stack serials wrap here; row keys combine two serials below 2^26 into one exact number. */
const MAX_STACK_SERIAL = 2 ** 25;
const SERIAL_FACTOR = 2 ** 26;
const NS_PER_S = 1_000_000_000;
/** Thread-name attribute objects kept (cleared when reached). */
const MAX_THREAD_NAMES = 4096;
const STACK_LOST: ProfileFrame = { function: "[stack lost]" };
const NO_STACK_FRAME: ProfileFrame = { function: "[no stack]" };

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

/** A stack read from the stack map, decoded on first use as kernel or user addresses. */
interface CachedStack {
  /** Unique (until it wraps at MAX_STACK_SERIAL) among stacks read: rows are keyed by serials, not by addresses. */
  serial: number;
  raw: Uint8Array;
  kernel: bigint[] | undefined;
  user: number[] | undefined;
  /** The kernel frames, symbolized once (kernel symbols do not depend on the process). */
  kernelFrames: ProfileFrame[] | undefined;
  /** The drain that last saw a count referring to it. */
  seen: number;
}

/** Samples of one (thread name, kernel stack, user stack) of a process in the current period. */
interface Row {
  comm: string;
  kernelStack: CachedStack | undefined;
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
  /** The current period's samples: pid -> thread name -> (kernel serial, user serial, lost) -> row. */
  #period = new Map<number, Map<string, Map<number, Row>>>();
  /** Stacks read and kept in the kernel's stack map, by stack id. */
  readonly #stacks = new Map<number, CachedStack>();
  #nextSerial = 1;
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
  readonly #threadAttrs = new Map<string, Attributes>();
  readonly #view = (): ProfilingView => {
    const { enabled, sample_rate } = profilingOf(this.#config);
    return { enabled, sample_rate, profiles_collected: this.#profilesCollected };
  };

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
    this.#ctx.status.provide(PROFILING_STATUS.name, this.#view);
    this.#begin(this.#ctx.config);
  }

  #begin(config: Config): void {
    const host = this.#host!;
    this.#config = config;
    if (!profilingOf(config).enabled) {
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
    const profiling = profilingOf(config);
    const spec = profileSetSpec(profiling.sample_rate, this.#opts.targetPid ?? profiling.pid);
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
    const intervalMs = msOf(profiling, "interval");
    this.#timer = setInterval(() => this.collect(), intervalMs);
    if (intervalMs > DRAIN_INTERVAL_MS) this.#drainTimer = setInterval(() => this.drain(), DRAIN_INTERVAL_MS);
    // The kernel's symbols, read before the first period ends: read then, they held the event loop ~100 ms (ring
    // buffers filling meanwhile). Should this fail, the first kernel frame reads them as before.
    this.#symbolizer.preloadKernel().catch((e: Error) => host.logger.debug("reading kernel symbols ahead failed", { error: e.message }));
    host.logger.info("CPU profiling attached", { sample_rate: profiling.sample_rate, interval: profiling.interval });
    host.report("ok");
  }

  /** Moves the kernel's counts into the current period's totals (clearing them in the kernel) and reads new stacks. Exposed for tests. */
  drain(): boolean {
    const set = this.#set;
    if (!set) return false;
    try {
      const counts = set.object.map(COUNTS_MAP)!;
      const stacks = set.object.map(STACKS_MAP)!;
      const drain = ++this.#drains;
      forEachCount(counts, (pid, userId, kernelId, comm, count) => {
        const kernelStack = kernelId >= 0 ? this.#stack(stacks, kernelId, drain) : undefined;
        const userStack = userId >= 0 ? this.#stack(stacks, userId, drain) : undefined;
        const kernel = kernelStack ? (kernelStack.kernel ??= decodeStack(kernelStack.raw)) : undefined;
        const user = userStack ? (userStack.user ??= decodeUserStack(userStack.raw)) : undefined;
        const lost = (kernelId >= 0 && !kernel) || (userId >= 0 && !user) || (kernelId !== NO_STACK && kernelId < 0) || (userId !== NO_STACK && userId < 0);
        const key = (kernelStack?.serial ?? 0) * SERIAL_FACTOR + (userStack?.serial ?? 0) * 2 + (lost ? 1 : 0);
        let threads = this.#period.get(pid);
        if (!threads) this.#period.set(pid, (threads = new Map()));
        let rows = threads.get(comm);
        if (!rows) threads.set(comm, (rows = new Map()));
        const row = rows.get(key);
        if (row) row.count += count;
        else rows.set(key, { comm, kernelStack, kernel, user, lost, count });
      });
      this.#evictStacks(stacks, drain);
      if (drain % FULL_SWEEP_EVERY_DRAINS === 0) clearUnreferencedStacks(counts, stacks, this.#stacks);
      this.#checkErrors(set.object.map(ERRORS_MAP));
      return true;
    } catch (e) {
      this.#host?.report("recoverable_error", `reading profile maps failed: ${(e as Error).message}`);
      return false;
    }
  }

  /** The stack at `id`: from the cache, else read from the map (one syscall) and kept; undefined when the map lacks it. */
  #stack(stacks: BpfMapApi, id: number, drain: number): CachedStack | undefined {
    let s = this.#stacks.get(id);
    if (!s) {
      const raw = stacks.lookupU32Key(id);
      if (!raw) return undefined;
      const serial = this.#nextSerial;
      this.#nextSerial = serial + 1 >= MAX_STACK_SERIAL ? 1 : serial + 1;
      s = { serial, raw, kernel: undefined, user: undefined, kernelFrames: undefined, seen: drain };
      this.#stacks.set(id, s);
    }
    s.seen = drain;
    return s;
  }

  /** Deletes the stacks no count referred to for STACK_KEEP_DRAINS drains, from the map and the cache together. */
  #evictStacks(stacks: BpfMapApi, drain: number): void {
    let del: ((key: Uint8Array) => boolean) | undefined;
    const key = new Uint32Array(1);
    const keyBytes = new Uint8Array(key.buffer);
    for (const [id, s] of this.#stacks) {
      if (drain - s.seen < STACK_KEEP_DRAINS) continue;
      del ??= needs(stacks, "delete");
      key[0] = id;
      del(keyBytes.slice());
      this.#stacks.delete(id);
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

  #build(period: Map<number, Map<string, Map<number, Row>>>, start: bigint, end: bigint): ProfileItem[] {
    const sym = this.#symbolizer;
    sym.beginPeriod();
    const rate = profilingOf(this.#config).sample_rate;
    const items: ProfileItem[] = [];
    for (const [pid, threads] of period) {
      const samples: ProfileSample[] = [];
      let first: Row | undefined;
      for (const rows of threads.values()) {
        let attributes: Attributes | undefined;
        for (const row of rows.values()) {
          first ??= row;
          attributes ??= this.#threadAttributes(row.comm);
          let stack: ProfileFrame[];
          const kernel = row.kernelStack && row.kernel ? (row.kernelStack.kernelFrames ??= row.kernel.map((a) => sym.kernelFrame(a))) : undefined;
          if (row.user) {
            stack = sym.userFrames(pid, row.user);
            if (kernel) stack = kernel.concat(stack);
          } else stack = kernel ? kernel.slice() : [];
          if (stack.length === 0) stack.push(row.lost ? STACK_LOST : NO_STACK_FRAME);
          samples.push({ stack, value: row.count, attributes });
        }
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

  /** The sample attributes of a thread name (one object per name, shared by samples: the encoder interns by identity). */
  #threadAttributes(comm: string): Attributes {
    let a = this.#threadAttrs.get(comm);
    if (!a) {
      if (this.#threadAttrs.size >= MAX_THREAD_NAMES) this.#threadAttrs.clear();
      this.#threadAttrs.set(comm, (a = { "thread.name": comm }));
    }
    return a;
  }

  /** The resource of a process's profile: its workload (src/workloads), else one object per process, reused (the pipeline caches by identity); undefined for the agent itself. */
  #resource(pid: number, threadComm: string): Attributes | undefined {
    if (pid === SELF_PID) return undefined;
    const workload = this.#ctx.workloads.forPid(pid);
    if (workload?.["service.name"] !== undefined) return workload;
    let comm = threadComm;
    try {
      comm = readFileSync(`/proc/${pid}/comm`, "utf8").trim() || threadComm;
    } catch {
      // The process ended: keep the thread's name.
    }
    const known = this.#resources.get(pid);
    if (known && known.comm === comm) return known.attributes;
    const attributes: Attributes = { ...(workload ?? {}), "process.pid": pid, "process.executable.name": comm };
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
    const c = profilingOf(this.#config);
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
    this.#stacks.clear();
  }

  async shutdown(): Promise<void> {
    await this.#stop(true);
    this.#ctx.status.withdraw(PROFILING_STATUS.name, this.#view);
  }

  async reload(next: Config, previous: Config): Promise<void> {
    const changed = JSON.stringify(profilingOf(next)) !== JSON.stringify(profilingOf(previous)) || next.agent.ebpf.enabled !== previous.agent.ebpf.enabled;
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

/** Entries taken per batch call of the counts map (its max_entries: one call takes everything). */
const COUNTS_BATCH = MAX_KEYS;
/** A count is a u64. */
const COUNT_VALUE_BYTES = 8;

/**
 * Calls `each` for every count in the map and clears them: one bpf_map_lookup_and_delete_batch where the kernel
 * has it, else keys, lookup and delete per key (a sample landing between lookup and delete is lost).
 */
function forEachCount(counts: BpfMapApi, each: (pid: number, userId: number, kernelId: number, comm: string, count: number) => void): void {
  const batch = counts.takeBatch?.(COUNTS_BATCH);
  if (batch) {
    const kdv = new DataView(batch.keys.buffer, batch.keys.byteOffset, batch.keys.byteLength);
    const vdv = new DataView(batch.values.buffer, batch.values.byteOffset, batch.values.byteLength);
    for (let i = 0; i < batch.count; i++) {
      const o = i * PROFILE_KEY_BYTES;
      const count = Number(vdv.getBigUint64(i * COUNT_VALUE_BYTES, true));
      if (count === 0) continue;
      each(kdv.getUint32(o, true), kdv.getInt32(o + 4, true), kdv.getInt32(o + 8, true), decodeComm(batch.keys, o + 16), count);
    }
    return;
  }
  const keys = needs(counts, "keys");
  const lookup = needs(counts, "lookup");
  const del = needs(counts, "delete");
  for (const raw of keys(MAX_KEYS)) {
    const value = lookup(raw);
    del(raw);
    if (!value) continue;
    const key = decodeProfileKey(raw);
    const count = decodeCount(value);
    if (count === 0) continue;
    each(key.pid, key.userStackId, key.kernelStackId, key.comm, count);
  }
}

/** Frees every stack id that no count refers to and that is not cached (ids whose counts were lost in the kernel would otherwise stay). */
function clearUnreferencedStacks(counts: BpfMapApi, stacks: BpfMapApi, cached: Map<number, unknown>): void {
  const keep = new Set<number>();
  for (const raw of needs(counts, "keys")(MAX_KEYS)) {
    const k = decodeProfileKey(raw);
    keep.add(k.userStackId);
    keep.add(k.kernelStackId);
  }
  const del = needs(stacks, "delete");
  for (const raw of needs(stacks, "keys")(MAX_KEYS)) {
    const id = new DataView(raw.buffer, raw.byteOffset, 4).getUint32(0, true);
    if (!keep.has(id) && !cached.has(id)) del(raw);
  }
}
