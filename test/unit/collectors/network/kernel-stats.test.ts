/**
 * What the network component reads of the kernel's `stats` map each second, over a fake of the native layer:
 * exchanges refused their capture count as rate_limit span drops, and HTTP/2 connections whose forwarding
 * stopped because a record was lost in a full ring (no record tells user space) as http2_state_lost drops, two
 * directions each.
 */
import { afterEach, beforeEach, describe, expect, jest, test } from "bun:test";
import { NetworkCollector } from "../../../../src/collectors/network/component";
import { networkSetSpec, NetworkStat } from "../../../../src/collectors/network/spec";
import { EbpfCore } from "../../../../src/ebpf/core";
import { FakeMap, FakeObject, FakeRuntime, fakeDeps, testContext } from "../../../helpers/fakes/ebpf";
import { RecordingPipeline, fakeContext, recordingHost } from "../../../helpers/fakes/collectors";
import { advanceTimersByTime, advanceUntil } from "../../../helpers/fake-timers";
import { Logger } from "../../../../src/log";

class StatsMap extends FakeMap {
  readonly values = new Map<number, bigint>();
  override sumPerCpuU64(key: number): bigint {
    return this.values.get(key) ?? 0n;
  }
}

function setup() {
  const ctx = testContext("agent:\n  ebpf:\n    network:\n      http_metrics: false\n");
  const spec = networkSetSpec({ selfPid: 999, http: true, httpCapture: "socket", httpExchangesPerSecond: 100, h2RecordsPerSecond: 100, maxConnections: 1024, redMetrics: false, kernelBtf: true });
  const maps = [
    ...spec.ringBuffers.map((r) => ({ name: r.map, typeName: "ringbuf", maxEntries: 1 << 20 })),
    ...spec.ringBuffers.map((r) => ({ name: r.lostMap!, typeName: "percpu_array", maxEntries: 1 })),
    ...Object.keys(spec.mapSizes ?? {}).map((name) => ({ name, typeName: "hash", maxEntries: 1024 })),
  ];
  const runtime = new FakeRuntime(spec.programs.map((p) => ({ name: p.name, typeName: "tracepoint" })), maps, Object.keys(spec.constants ?? {}));
  let stats!: StatsMap;
  const open = runtime.openObject.bind(runtime);
  runtime.openObject = (bytes, name) => {
    const o: FakeObject = open(bytes, name);
    stats = new StatsMap(o, { name: "stats", typeName: "percpu_array", maxEntries: 16 });
    const map = o.map.bind(o);
    o.map = (n: string) => (n === "stats" ? stats : map(n));
    return o;
  };
  const core = new EbpfCore(ctx, fakeDeps(runtime));
  const agentCtx = Object.assign(Object.create(ctx), { pipeline: new RecordingPipeline(), workloads: { forContainer: () => undefined, forPid: () => undefined } });
  const collector = new NetworkCollector(agentCtx, core, 999);
  return { ctx, collector, runtime, stats: () => stats };
}

describe("ebpf/network: the kernel's stats", () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  test("HTTP/2 connections stopped by a record lost in a full ring count two http2_state_lost drops each; refused exchanges count as rate_limit; those found in their middle in svc_ebpf_http2_midstream_total, resumed ones in svc_ebpf_http2_resumed_total", async () => {
    const t = setup();
    const host = recordingHost();
    await t.collector.start(host);
    await advanceUntil(() => t.stats() !== undefined && host.states.some((s) => s.state === "ok"), "network set attached", 1, 1000).catch((e: Error) => {
      throw new Error(`${e.message}: ${JSON.stringify(host.states)}`);
    });
    const dropped = async (reason: string) => {
      const line = (await t.ctx.metrics.registry.metrics()).split("\n").find((l) => l.startsWith(`svc_spans_dropped_total{reason="${reason}"}`));
      return Number(line?.split(" ").at(-1) ?? 0);
    };
    t.stats().values.set(NetworkStat.H2_STOPPED_LOST, 3n);
    t.stats().values.set(NetworkStat.HTTP_SAMPLED_OUT, 5n);
    advanceTimersByTime(1000);
    expect([await dropped("http2_state_lost"), await dropped("rate_limit")]).toEqual([6, 5]);
    t.stats().values.set(NetworkStat.H2_STOPPED_LOST, 4n);
    t.stats().values.set(NetworkStat.H2_MIDSTREAM, 3n);
    t.stats().values.set(NetworkStat.H2_RESUMED, 2n);
    advanceTimersByTime(1000);
    expect([await dropped("http2_state_lost"), await dropped("rate_limit")]).toEqual([8, 5]);
    // HTTP/2 connections found in their middle, and stopped ones forwarded again: counted, not drops.
    expect((await t.ctx.metrics.registry.metrics()).split("\n")).toEqual(expect.arrayContaining(["svc_ebpf_http2_midstream_total 3", "svc_ebpf_http2_resumed_total 2"]));
    await t.collector.shutdown(AbortSignal.timeout(1000));
  });

  test("calls over max_connections, calls the in-flight map had no room for and requests replaced by pipelined ones count in svc_ebpf_network_dropped_total, with a warning at most once a minute", async () => {
    const t = setup();
    const logs: Array<Record<string, unknown>> = [];
    const host = { ...recordingHost(), logger: new Logger({ sink: (l) => void logs.push(JSON.parse(l)) }) };
    await t.collector.start(host);
    await advanceUntil(() => t.stats() !== undefined && host.states.some((s) => s.state === "ok"), "network set attached", 1, 1000);
    const dropped = async () => {
      const lines = (await t.ctx.metrics.registry.metrics()).split("\n").filter((l) => l.startsWith("svc_ebpf_network_dropped_total{"));
      return Object.fromEntries(lines.map((l) => [/reason="([a-z_]+)"/.exec(l)![1], Number(l.split(" ").at(-1))]));
    };
    expect(await dropped()).toEqual({ conns_full: 0, pending_full: 0, red_replaced: 0 });
    t.stats().values.set(NetworkStat.CONNS_FULL, 7n);
    t.stats().values.set(NetworkStat.RED_REPLACED, 2n);
    advanceTimersByTime(1000);
    expect(await dropped()).toEqual({ conns_full: 7, pending_full: 0, red_replaced: 2 });
    t.stats().values.set(NetworkStat.CONNS_FULL, 10n);
    t.stats().values.set(NetworkStat.PENDING_FULL, 1n);
    advanceTimersByTime(1000);
    expect(await dropped()).toEqual({ conns_full: 10, pending_full: 1, red_replaced: 2 });
    const warnings = (reason: string) => logs.filter((l) => l.level === "warn" && l.reason === reason);
    // conns_full rose twice within a minute: one warning, naming the setting.
    expect(warnings("conns_full").map((l) => [l.count, l.max_connections])).toEqual([[7, 65_536]]);
    expect(warnings("pending_full")).toHaveLength(1);
    t.stats().values.set(NetworkStat.CONNS_FULL, 12n);
    advanceTimersByTime(60_000);
    // A minute later: the next warning carries what was counted since the previous one.
    expect(warnings("conns_full").map((l) => l.count)).toEqual([7, 5]);
    await t.collector.shutdown(AbortSignal.timeout(1000));
  });

  test("a reload of max_spans_per_second and http2_records_per_second sets them in the running set; another kernel key makes a new set", async () => {
    const t = setup();
    const host = recordingHost();
    await t.collector.start(host);
    await advanceUntil(() => t.stats() !== undefined && host.states.some((s) => s.state === "ok"), "network set attached", 1, 1000);
    expect(t.runtime.opened).toHaveLength(1);
    const first = t.runtime.opened[0]!;
    // Set before load from the configuration (http_metrics off: the kernel's budget is the span cap).
    expect(first.variables).toEqual({ http_requests_per_second: 250, h2_records_per_second: 50_000 });
    // Nothing written again at attach: the values set before load are the configuration's.
    expect(first.variableUpdates).toEqual([]);
    const config = (yaml: string) => fakeContext(`agent:\n  ebpf:\n    network:\n      http_metrics: false\n${yaml}`).config;
    const limits = config("      max_spans_per_second: 40\n      http2_records_per_second: 700\n");
    await t.collector.reload(limits, fakeContext("agent:\n  ebpf:\n    network:\n      http_metrics: false\n").config);
    t.ctx.setConfig(limits as unknown as Parameters<typeof t.ctx.setConfig>[0]);
    expect(t.runtime.opened).toHaveLength(1);
    expect(first.variableUpdates).toEqual([{ http_requests_per_second: 40, h2_records_per_second: 700 }]);
    const rebuilt = config("      max_spans_per_second: 40\n      http2_records_per_second: 700\n      max_connections: 2048\n");
    await t.collector.reload(rebuilt, limits);
    t.ctx.setConfig(rebuilt as unknown as Parameters<typeof t.ctx.setConfig>[0]);
    await advanceUntil(() => t.runtime.opened.length === 2 && t.runtime.opened[1]!.loaded, "a new set loaded", 1, 1000);
    expect(t.runtime.opened[1]!.variables).toEqual({ http_requests_per_second: 40, h2_records_per_second: 700 });
    await t.collector.shutdown(AbortSignal.timeout(1000));
  });
});
