/** collector/profiling over fakes of the native layer (ffi/types) and of symbolization: no kernel. */
import { afterEach, beforeEach, describe, expect, jest, test } from "bun:test";
import { ProfilingCollector, Symbolizer } from "../../../../src/collectors/profiling";
import { PROFILE_KEY_BYTES } from "../../../../src/collectors/profiling/decode";
import { EbpfCore } from "../../../../src/ebpf/core";
import type { ProfileFrame } from "../../../../src/export/model";
import { PROFILING_STATUS, type ProfilingView } from "../../../../src/collectors/profiling/status";
import { parseConfig } from "../../../../src/config/load";
import { FakeMap, FakeObject, FakeRuntime, fakeDeps, testContext } from "../../../helpers/fakes/ebpf";
import { RecordingPipeline, recordingHost } from "../../../helpers/fakes/collectors";
import { advanceTimersByTime, advanceUntil, nextTurn } from "../../../helpers/fake-timers";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

/** A hash/stack map held in a JS Map, keyed by the raw key bytes. */
class HashFakeMap extends FakeMap {
  readonly data = new Map<string, Uint8Array>();
  readonly deleted: string[] = [];
  errors = [0n, 0n, 0n];
  put(key: Uint8Array, value: Uint8Array): void {
    this.data.set(hex(key), value);
  }
  lookups = 0;
  /** When set, takeBatch is offered (bpf_map_lookup_and_delete_batch); else keys/lookup/delete are used. */
  batch = false;
  takeBatch?: (limit: number) => { count: number; keys: Uint8Array; values: Uint8Array } | undefined = (limit) => {
    if (!this.batch) return undefined;
    const entries = [...this.data.entries()].slice(0, limit);
    const keys = new Uint8Array(entries.length * PROFILE_KEY_BYTES);
    const values = new Uint8Array(entries.length * 8);
    entries.forEach(([k, v], i) => {
      keys.set(Buffer.from(k, "hex"), i * PROFILE_KEY_BYTES);
      values.set(v, i * 8);
      this.data.delete(k);
    });
    return { count: entries.length, keys, values };
  };
  override lookupU32Key(key: number): Uint8Array | undefined {
    this.lookups++;
    return this.data.get(hex(new Uint8Array(new Uint32Array([key]).buffer)));
  }
  override sumPerCpuU64(key: number): bigint {
    return this.errors[key] ?? 0n;
  }
  lookup(key: Uint8Array): Uint8Array | undefined {
    return this.data.get(hex(key));
  }
  keys(limit: number): Uint8Array[] {
    return [...this.data.keys()].slice(0, limit).map((k) => new Uint8Array(Buffer.from(k, "hex")));
  }
  delete(key: Uint8Array): boolean {
    this.deleted.push(hex(key));
    return this.data.delete(hex(key));
  }
}

function countKey(pid: number, user: number, kernel: number, comm: string): Uint8Array {
  const b = new Uint8Array(PROFILE_KEY_BYTES);
  const dv = new DataView(b.buffer);
  dv.setUint32(0, pid, true);
  dv.setInt32(4, user, true);
  dv.setInt32(8, kernel, true);
  b.set(new TextEncoder().encode(comm), 16);
  return b;
}

const u64 = (n: number) => new Uint8Array(new BigUint64Array([BigInt(n)]).buffer);
const u32 = (n: number) => new Uint8Array(new Uint32Array([n]).buffer);
const stack = (...addrs: bigint[]) => {
  const v = new BigUint64Array(127);
  v.set(addrs);
  return new Uint8Array(v.buffer);
};

class FakeSymbolizer extends Symbolizer {
  override kernelFrame(address: bigint): ProfileFrame {
    return { function: `k_${address.toString(16)}`, binary: "[kernel.kallsyms]", address };
  }
  override userFrames(pid: number, addresses: readonly number[]): ProfileFrame[] {
    return addresses.map((a) => ({ function: `u${pid}_${a.toString(16)}`, binary: "/bin/x", address: BigInt(a) }));
  }
}

function setup(yaml = "agent:\n  profiling:\n    enabled: true\n    sample_rate: 49\n    interval: 1h\n") {
  const ctx = testContext(yaml);
  const pipeline = new RecordingPipeline();
  const runtime = new FakeRuntime([{ name: "profile_cpu", typeName: "perf_event" }], [], ["target_pid"]);
  let counts!: HashFakeMap;
  let stacks!: HashFakeMap;
  let errors!: HashFakeMap;
  const open = runtime.openObject.bind(runtime);
  runtime.openObject = (bytes, name) => {
    const o: FakeObject = open(bytes, name);
    counts = new HashFakeMap(o, { name: "profile_counts", typeName: "hash", maxEntries: 16384 });
    stacks = new HashFakeMap(o, { name: "profile_stacks", typeName: "stack_trace", maxEntries: 16384 });
    errors = new HashFakeMap(o, { name: "profile_errors", typeName: "percpu_array", maxEntries: 3 });
    const maps: Record<string, FakeMap> = { profile_counts: counts, profile_stacks: stacks, profile_errors: errors };
    o.map = (n: string) => maps[n];
    return o;
  };
  const core = new EbpfCore(ctx, fakeDeps(runtime));
  const agentCtx = Object.assign(Object.create(ctx), { pipeline, workloads: { forContainer: () => undefined, forPid: (pid: number) => (pid === 10 ? { "k8s.pod.name": "web" } : undefined) } });
  const collector = new ProfilingCollector(agentCtx, { core, symbolizer: new FakeSymbolizer() });
  return { ctx, pipeline, runtime, collector, maps: () => ({ counts, stacks, errors }) };
}

describe("collector/profiling", () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());
  /** Loading and attaching take no time on the fake clock: turns of the event loop bring them. */
  const settled = (what: string, cond: () => boolean) => advanceUntil(cond, what, 0, 100);

  test("reads and clears the counts, builds one profile per process (kernel frames above user frames), frees unreferenced stacks", async () => {
    const { ctx, pipeline, runtime, collector, maps } = setup();
    const host = recordingHost();
    await collector.start(host);
    await settled("attached", () => host.last().state === "ok");
    expect(runtime.opened[0]!.program("profile_cpu")!).toBeDefined();
    const { counts, stacks } = maps();
    stacks.put(u32(1), stack(0x1000n, 0x2000n));
    stacks.put(u32(2), stack(0xffffffff81000000n));
    stacks.put(u32(3), stack(0x3000n));
    stacks.put(u32(9), stack(0x9000n)); // referenced by nothing: freed
    counts.put(countKey(10, 1, 2, "worker"), u64(5));
    counts.put(countKey(10, 1, -14, "main"), u64(7));
    counts.put(countKey(20, 3, -14, "other"), u64(2));
    const items = collector.collect();
    expect(items).toHaveLength(2);
    const p10 = items.find((i) => i.resource?.["process.pid"] === 10)!;
    expect(p10.resource).toMatchObject({ "k8s.pod.name": "web", "process.pid": 10 });
    expect(p10.period).toBe(Math.round(1e9 / 49));
    expect(p10.samples.map((s) => [s.value, s.attributes?.["thread.name"], s.stack.map((f) => f.function)])).toEqual([
      [5, "worker", ["k_ffffffff81000000", "u10_1000", "u10_2000"]],
      [7, "main", ["u10_1000", "u10_2000"]],
    ]);
    expect(counts.data.size).toBe(0);
    // Stacks read stay in the map (cached) while counts refer to them; unreferenced for 3 drains they are
    // freed; one no count ever referred to goes at the next full sweep (every 10 drains).
    expect([...stacks.data.keys()].sort()).toEqual([u32(1), u32(2), u32(3), u32(9)].map(hex));
    collector.drain();
    expect(stacks.data.size).toBe(4);
    for (let i = 0; i < 2; i++) collector.drain();
    expect([...stacks.data.keys()]).toEqual([hex(u32(9))]);
    for (let i = 0; i < 7; i++) collector.drain();
    expect(stacks.data.size).toBe(0);
    expect(pipeline.accepted.profiles).toHaveLength(2);
    expect(ctx.status.view<ProfilingView>(PROFILING_STATUS.name)).toEqual({ enabled: true, sample_rate: 49, profiles_collected: 2 });
    expect(collector.latestPprof()!.length).toBeGreaterThan(20);
    // Nothing new: no profile.
    expect(collector.collect()).toHaveLength(0);
    await collector.shutdown();
    expect(runtime.opened[0]!.closed).toBe(true);
  });

  test("the period timer exports on its own every interval", async () => {
    const { pipeline, collector, maps } = setup("agent:\n  profiling:\n    enabled: true\n    interval: 1s\n");
    const host = recordingHost();
    await collector.start(host);
      // Attaching takes no time on the fake clock: the interval starts there.
    // The interval starts at the attach.
    await settled("attached", () => host.last().state === "ok");
    maps().stacks.put(u32(1), stack(0x1000n));
    maps().counts.put(countKey(30, 1, -14, "t"), u64(4));
    advanceTimersByTime(999);
    await nextTurn();
    expect(pipeline.accepted.profiles).toHaveLength(0);
    advanceTimersByTime(1);
    await settled("a profile exported by the timer", () => pipeline.accepted.profiles.length > 0);
    expect(pipeline.accepted.profiles).toHaveLength(1);
    expect(pipeline.accepted.profiles[0]!.samples[0]!.value).toBe(4);
    await collector.shutdown();
  });

  test("disabled reports disabled; profiling without eBPF is a permanent error; a reload applies the new sample rate", async () => {
    const off = setup("");
    const h1 = recordingHost();
    await off.collector.start(h1);
    expect(h1.last().state).toBe("disabled");
    expect(off.ctx.status.view<ProfilingView>(PROFILING_STATUS.name)).toEqual({ enabled: false, sample_rate: 99, profiles_collected: 0 });

    const noEbpf = setup("agent:\n  ebpf:\n    enabled: false\n  profiling:\n    enabled: true\n");
    const h2 = recordingHost();
    await noEbpf.collector.start(h2);
    expect(h2.last()).toEqual({ state: "permanent_error", reason: "agent.profiling.enabled needs agent.ebpf.enabled" });

    const on = setup();
    const h3 = recordingHost();
    await on.collector.start(h3);
    await settled("attached", () => h3.last().state === "ok");
    const next = parseConfig("agent:\n  profiling:\n    enabled: true\n    sample_rate: 199\n    interval: 1h\n", {});
    await on.collector.reload!(next, on.ctx.config);
    await settled("re-attached", () => on.runtime.opened.length === 2 && h3.last().state === "ok");
    expect(on.runtime.opened[0]!.closed).toBe(true);
    expect(on.runtime.opened[0]!.program("profile_cpu")!.links[0]!.target).toEqual({ kind: "perf_event", event: "cpu-clock", frequencyHz: 49 });
    expect(on.runtime.opened[1]!.program("profile_cpu")!.links[0]!.target).toEqual({ kind: "perf_event", event: "cpu-clock", frequencyHz: 199 });
    expect(on.runtime.opened[1]!.program("profile_cpu")!.links[0]!.closed).toBe(false);
    expect(on.runtime.opened[0]!.program("profile_cpu")!.links[0]!.closed).toBe(true);
    expect(on.ctx.status.view<ProfilingView>(PROFILING_STATUS.name)).toMatchObject({ sample_rate: 199 });
    await on.collector.shutdown();
  });

  test("a stack referenced in later drains is read from the kernel once; counts taken in one batch when the map offers it", async () => {
    const { collector, maps } = setup();
    const host = recordingHost();
    await collector.start(host);
    await settled("attached", () => host.last().state === "ok");
    const { counts, stacks } = maps();
    counts.batch = true;
    stacks.put(u32(1), stack(0x1000n, 0x2000n));
    stacks.put(u32(2), stack(0xffffffff81000000n));
    for (let d = 0; d < 4; d++) {
      counts.put(countKey(10, 1, 2, "worker"), u64(3));
      counts.put(countKey(10, 1, -14, "main"), u64(1));
      expect(collector.drain()).toBe(true);
      expect(counts.data.size).toBe(0);
    }
    expect(stacks.lookups).toBe(2);
    const items = collector.collect();
    expect(items).toHaveLength(1);
    expect(items[0]!.samples.map((s) => [s.value, s.attributes?.["thread.name"], s.stack.map((f) => f.function)])).toEqual([
      [12, "worker", ["k_ffffffff81000000", "u10_1000", "u10_2000"]],
      [4, "main", ["u10_1000", "u10_2000"]],
    ]);
    // A stack id freed and then reused by the kernel for another stack is read again (cache and map go together).
    for (let i = 0; i < 5; i++) collector.drain();
    expect(stacks.data.size).toBe(0);
    stacks.put(u32(1), stack(0x5000n));
    counts.put(countKey(10, 1, -14, "main"), u64(2));
    const next = collector.collect();
    expect(next[0]!.samples.map((s) => s.stack.map((f) => f.function))).toEqual([["u10_5000"]]);
    expect(stacks.lookups).toBe(3);
    await collector.shutdown();
  });
});
