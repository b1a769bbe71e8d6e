import { afterEach, beforeEach, describe, expect, jest, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { parseConfig } from "../../../src/config/load";
import { EbpfSetComponent, reloadSet } from "../../../src/ebpf/component";
import { EbpfCore, MAP_COUNT_LIMIT, MAP_SWEEP_SLICE_KEYS } from "../../../src/ebpf/core";
import { pollIntervalMs } from "../../../src/ebpf/pump";
import type { ProgramSetSpec } from "../../../src/ebpf/spec";
import type { ComponentHost, ComponentState } from "../../../src/lifecycle/component";
import { EbpfViewSchema, EBPF_STATUS, type EbpfView } from "../../../src/ebpf/status";
import { advanceUntil } from "../../helpers/fake-timers";
import { fakeDeps, fakeEnvironment, FakeObject, FakeRuntime, testContext, UNPRIVILEGED_STATUS, type TestContext } from "../../helpers/fakes/ebpf";

const SPEC: ProgramSetSpec<number> = {
  name: "probes",
  object: "probes",
  programs: [
    { name: "a", attach: { kind: "tracepoint", category: "sched", name: "sched_process_exec" }, required: true },
    { name: "kp", attach: { kind: "kprobe", func: "tcp_connect" }, required: false },
  ],
  ringBuffers: [{ map: "events", lostMap: "events_lost", decode: (v, o, len) => {
    if (len < 4) throw new RangeError("short");
    return v.getUint32(o, true);
  } }],
};

function runtime(): FakeRuntime {
  return new FakeRuntime([{ name: "a" }, { name: "kp" }], [
    { name: "events", typeName: "ringbuf", maxEntries: 1 << 24 },
    { name: "events_lost", typeName: "percpu_array", maxEntries: 1, lost: 5n },
    { name: "conns", typeName: "hash", maxEntries: 1024, entries: 7 },
    { name: "big", typeName: "hash", maxEntries: 100_000, entries: 70_000 },
  ]);
}

function host(ctx: TestContext, id: string): ComponentHost & { states: Array<[ComponentState, string | undefined]> } {
  const states: Array<[ComponentState, string | undefined]> = [];
  return {
    states,
    logger: ctx.logger.child({ component: id }),
    report(state, reason) {
      states.push([state, reason]);
      ctx.status.report(id, "ebpf", state, reason);
    },
  };
}

/** Under the fake clock, 1 ms at a time: loads finish and the pumps poll as the clock moves. */
const until = (cond: () => boolean, what: string) => advanceUntil(cond, what, 1, 1000);

const u32 = (n: number) => new Uint8Array(new Uint32Array([n]).buffer);

/**
 * The order of what replaces the running object `first`: its links closing ("old <program> detached"), the next
 * object's load ("new loaded") and its programs attaching ("new <program> attached").
 */
function replacementSteps(rt: FakeRuntime, first: FakeObject): string[] {
  const steps: string[] = [];
  for (const p of first.programs()) for (const l of p.links) {
    const close = l.close.bind(l);
    l.close = () => {
      steps.push(`old ${p.name} detached`);
      close();
    };
  }
  const open = rt.openObject.bind(rt);
  rt.openObject = (bytes, name) => {
    const o = open(bytes, name);
    const load = o.load.bind(o);
    o.load = (options) => {
      steps.push("new loaded");
      load(options);
    };
    for (const p of o.programs()) {
      const attach = p.attach.bind(p);
      p.attach = (target) => {
        steps.push(`new ${p.name} attached`);
        return attach(target);
      };
    }
    return o;
  };
  return steps;
}

describe("ebpf/<set> component and the ebpf view", () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  test("loads in the background, reports ok, feeds events, publishes the view and the metrics", async () => {
    const ctx = testContext("agent:\n  ebpf:\n    ringbuf_size: 3MiB\n");
    const rt = runtime();
    const core = new EbpfCore(ctx, fakeDeps(rt, fakeEnvironment({ exists: (p) => !p.includes("kprobe") })));
    const events: number[] = [];
    const c = new EbpfSetComponent(core, { spec: SPEC, onEvent: (e) => events.push(e) });
    const h = host(ctx, c.id);
    await c.start(h);
    await until(() => h.states.some(([s]) => s === "ok"), "ok");
    expect(c.id).toBe("ebpf/probes");
    expect(ctx.status.readiness().checks.ebpf).toBe("ok");

    const reader = rt.last.map("events")!.reader!;
    reader.push(u32(7));
    reader.push(u32(8));
    reader.push(new Uint8Array(2));
    await until(() => events.length === 2, "events");
    expect(events).toEqual([7, 8]);
    core.refresh();
    await core.sweepMaps();

    const view = ctx.status.view<EbpfView>(EBPF_STATUS.name)!;
    expect(Value.Check(EbpfViewSchema, view)).toBe(true);
    expect(view.enabled).toBe(true);
    expect(view.programs).toEqual([
      { name: "a", type: "tracepoint", attached: true, id: expect.any(Number) },
      { name: "kp", type: "kprobe", attached: false, id: 0, reason: expect.stringContaining("ENOENT") },
    ]);
    expect(view.maps).toContainEqual({ name: "probes/conns", type: "hash", entries: 7, max_entries: 1024 });
    // Counted in slices of MAP_SWEEP_SLICE_KEYS between event loop turns, bounded by MAP_COUNT_LIMIT.
    expect(view.maps).toContainEqual({ name: "probes/big", type: "hash", entries: MAP_COUNT_LIMIT, max_entries: 100_000 });
    expect(Math.max(...rt.last.map("big")!.stepped)).toBeLessThanOrEqual(MAP_SWEEP_SLICE_KEYS);
    expect(view.ringbuf).toEqual({ size: 4 * 1024 * 1024, events_received: 2, events_lost: 5 });
    expect(rt.last.map("events")!.maxEntries).toBe(4 * 1024 * 1024);

    const text = await ctx.metrics.registry.metrics();
    expect(text).toContain('svc_ebpf_ringbuf_events_total{ringbuf="probes/events"} 2');
    expect(text).toContain('svc_ebpf_ringbuf_lost_total{ringbuf="probes/events"} 5');
    expect(text).toContain('svc_ebpf_map_entries{map="probes/conns"} 7');
    expect(text).toContain("svc_ebpf_programs_loaded 1");

    // Records still in the ring when the set stops reach the handler first (a shutdown's final flush sees them).
    for (let i = 0; i < 5000; i++) reader.push(u32(100 + i));
    await c.shutdown(AbortSignal.timeout(1000));
    await c.shutdown(AbortSignal.timeout(1000));
    expect(events).toHaveLength(2 + 5000);
    expect(events.at(-1)).toBe(5099);
    expect(await ctx.metrics.registry.metrics()).toContain('svc_ebpf_ringbuf_events_total{ringbuf="probes/events"} 5002');
    expect(rt.last.closed).toBe(true);
    expect(reader.closed).toBe(true);
    expect(ctx.status.view<EbpfView>(EBPF_STATUS.name)!.programs).toEqual([]);
    core.close();
  });

  test("a set's buffer series exist at 0 from its construction, before any load or event", async () => {
    const ctx = testContext("agent:\n  ebpf:\n    enabled: false\n");
    const core = new EbpfCore(ctx, fakeDeps(runtime(), fakeEnvironment()));
    new EbpfSetComponent(core, { spec: { ...SPEC, ringBuffers: [{ ...SPEC.ringBuffers[0]!, perfFallback: { map: "events_perf", constant: "use_perfbuf" } }] }, onEvent: () => undefined });
    const text = await ctx.metrics.registry.metrics();
    expect(text).toContain('svc_ebpf_ringbuf_events_total{ringbuf="probes/events"} 0\n');
    expect(text).toContain('svc_ebpf_ringbuf_lost_total{ringbuf="probes/events"} 0\n');
    expect(text).toContain('svc_ebpf_perf_events_total{buffer="probes/events_perf"} 0\n');
    expect(text).toContain('svc_ebpf_perf_lost_total{buffer="probes/events_perf"} 0\n');
  });

  test("a set loaded while another set's maps are being counted has its maps in the view at once, not a sweep interval later", async () => {
    const ctx = testContext();
    const core = new EbpfCore(ctx, fakeDeps(runtime(), fakeEnvironment({ exists: (p) => !p.includes("kprobe") })));
    const first = new EbpfSetComponent(core, { spec: SPEC, onEvent: () => undefined });
    const second = new EbpfSetComponent(core, { spec: { ...SPEC, name: "second" }, onEvent: () => undefined });
    const h1 = host(ctx, first.id);
    const h2 = host(ctx, second.id);
    await Promise.all([first.start(h1), second.start(h2)]);
    await until(() => h1.states.some(([s]) => s === "ok") && h2.states.some(([s]) => s === "ok"), "both sets ok");
    const names = () => ctx.status.view<EbpfView>(EBPF_STATUS.name)!.maps.map((m) => m.name);
    // `until` gives up after 1 s of the fake clock; the next periodic sweep is MAP_SWEEP_INTERVAL_MS (10 s) away.
    await until(() => names().includes("probes/big") && names().includes("second/big"), "both sets' maps in the view");
    const summary = ctx.status.summary<{ maps_created: number }>(EBPF_STATUS.name)!;
    expect(summary.maps_created).toBe(names().length);
    expect(new Set((await ctx.metrics.registry.metrics()).match(/^svc_ebpf_map_entries\{map="[^"]+"\}/gm)).size).toBe(names().length);
    await first.shutdown(AbortSignal.timeout(1000));
    await second.shutdown(AbortSignal.timeout(1000));
    core.close();
  });

  test("agent.ebpf.enabled false: the component is disabled, nothing native is touched, the view says enabled:false", async () => {
    const ctx = testContext("agent:\n  ebpf:\n    enabled: false\n");
    let opened = 0;
    const core = new EbpfCore(ctx, { ...fakeDeps(runtime()), openRuntime: async () => (opened++, runtime()) });
    const c = new EbpfSetComponent(core, { spec: SPEC, onEvent: () => {} });
    const h = host(ctx, c.id);
    await c.start(h);
    expect(h.states).toEqual([["disabled", undefined]]);
    expect(opened).toBe(0);
    expect(ctx.status.view<EbpfView>(EBPF_STATUS.name)!.enabled).toBe(false);
    expect(ctx.status.readiness().checks.ebpf).toBe("ok");
    await c.shutdown(AbortSignal.timeout(1000));
  });

  test("without privileges: permanent_error with the reason in status and readiness, programs listed with it", async () => {
    const ctx = testContext();
    const core = new EbpfCore(ctx, fakeDeps(runtime(), fakeEnvironment({ procStatus: () => UNPRIVILEGED_STATUS })));
    const c = new EbpfSetComponent(core, { spec: SPEC, onEvent: () => {} });
    const h = host(ctx, c.id);
    await c.start(h);
    await until(() => h.states.some(([s]) => s === "permanent_error"), "permanent_error");
    expect(ctx.status.readiness().checks.ebpf).toContain("failed: missing privileges");
    const view = ctx.status.view<EbpfView>(EBPF_STATUS.name)!;
    expect(view.programs.every((p) => !p.attached && p.reason?.includes("missing privileges"))).toBe(true);
    expect(ctx.records.some((r) => r.msg === "eBPF environment check" && r.check === "privileges" && r.level === "error")).toBe(true);
    await c.shutdown(AbortSignal.timeout(1000));
  });

  test("a required program failing is permanent_error; agent.ebpf.debug routes libbpf lines to the logger", async () => {
    const ctx = testContext("agent:\n  ebpf:\n    debug: true\n");
    const rt = new FakeRuntime([{ name: "a", failLoad: { errno: 13, verifierLog: "R1 invalid mem access" } }, { name: "kp" }], [{ name: "events", typeName: "ringbuf", maxEntries: 4096 }]);
    const core = new EbpfCore(ctx, fakeDeps(rt));
    const c = new EbpfSetComponent(core, { spec: SPEC, onEvent: () => {} });
    const h = host(ctx, c.id);
    await c.start(h);
    await until(() => h.states.some(([s]) => s === "permanent_error"), "permanent_error");
    expect(h.states.at(-1)![1]).toContain("required program a failed to load");
    expect(core.verifierLogs().map((v) => [v.program, v.log])).toEqual([["probes/a", "R1 invalid mem access"]]);
    rt.sink!("debug", "libbpf: loading object 'probes'");
    expect(ctx.records.some((r) => r.level === "debug" && r.msg === "loading object 'probes'" && r.source === "libbpf")).toBe(true);
    await c.shutdown(AbortSignal.timeout(1000));
  });

  test("reload with a new ringbuf_size loads the set with it while the old one runs, and attaches it once the old one stopped", async () => {
    const ctx = testContext();
    const rt = runtime();
    const core = new EbpfCore(ctx, fakeDeps(rt));
    const c = new EbpfSetComponent(core, { spec: SPEC, onEvent: () => {} });
    const h = host(ctx, c.id);
    await c.start(h);
    await until(() => h.states.some(([s]) => s === "ok"), "ok");
    const first = rt.last;
    const steps = replacementSteps(rt, first);
    const prev = ctx.config;
    const next = parseConfig("agent:\n  ebpf:\n    ringbuf_size: 1MiB\n", {});
    ctx.setConfig(next);
    await c.reload(next, prev);
    expect(steps).toEqual(["new loaded", "old a detached", "new a attached"]);
    expect(h.states.at(-1)).toEqual(["ok", undefined]);
    expect(first.closed).toBe(true);
    expect(rt.last.map("events")!.maxEntries).toBe(1024 * 1024);
    expect(core.view().programs.filter((p) => p.attached).map((p) => [p.name, p.id])).toEqual([["a", rt.last.program("a")!.loadedId]]);
    await c.shutdown(AbortSignal.timeout(1000));
    core.close();
  });

  test("a set replaced on reload (reloadSet) is loaded while the old one runs, and attached once the old one stopped", async () => {
    const ctx = testContext();
    const rt = runtime();
    const core = new EbpfCore(ctx, fakeDeps(rt));
    const make = () => new EbpfSetComponent(core, { spec: SPEC, onEvent: () => {} });
    const old = make();
    const h = host(ctx, old.id);
    await old.start(h);
    await until(() => h.states.some(([s]) => s === "ok"), "ok");
    const first = rt.last;
    const steps = replacementSteps(rt, first);
    const replacement = await reloadSet(old, true, make, h, ctx.config, ctx.config);
    expect(replacement).not.toBe(old);
    expect(steps).toEqual(["new loaded", "old a detached", "new a attached"]);
    expect(first.closed).toBe(true);
    expect(h.states.at(-1)).toEqual(["ok", undefined]);
    expect(core.view().programs.filter((p) => p.attached).map((p) => [p.name, p.id])).toEqual([["a", rt.last.program("a")!.loadedId]]);
    await replacement.shutdown(AbortSignal.timeout(1000));
    core.close();
  });

  test("setVariables: the running set's .data globals now, and those of a set loaded later once it is loaded", async () => {
    const ctx = testContext();
    const rt = runtime();
    const core = new EbpfCore(ctx, fakeDeps(rt));
    const c = new EbpfSetComponent(core, { spec: { ...SPEC, variables: { limit: 1 } }, onEvent: () => {} });
    const h = host(ctx, c.id);
    await c.start(h);
    // Set while the set loads: applied once it is loaded.
    c.setVariables({ limit: 2 });
    await until(() => h.states.some(([s]) => s === "ok"), "ok");
    const first = rt.last;
    expect(first.variables).toEqual({ limit: 2 });
    c.setVariables({ limit: 3 });
    expect(first.variableUpdates.at(-1)).toEqual({ limit: 3 });
    // Loaded again (a new ring size): the spec's value, then the one set since.
    const next = parseConfig("agent:\n  ebpf:\n    ringbuf_size: 1MiB\n", {});
    const prev = ctx.config;
    ctx.setConfig(next);
    await c.reload(next, prev);
    await until(() => rt.last !== first && h.states.filter(([s]) => s === "ok").length === 2, "second ok");
    expect(rt.last.variables).toEqual({ limit: 3 });
    await c.shutdown(AbortSignal.timeout(1000));
    core.close();
  });

  test("poll interval follows the ring size", () => {
    expect(pollIntervalMs(16 * 1024 * 1024)).toBe(22);
    expect(pollIntervalMs(4096)).toBe(1);
    expect(pollIntervalMs(2 * 1024 * 1024)).toBe(2);
  });
});

describe("ring buffer sizes with ringbuf_size: auto", () => {
  test("each ring takes its set's own size, the http ring one second of the exchange budget or a tenth of one of HTTP/2 records; a configured size wins", async () => {
    const { ringSizeBytes, DEFAULT_AUTO_RINGBUF_BYTES } = await import("../../../src/ebpf/loader");
    const { httpRingAutoBytes } = await import("../../../src/collectors/network/spec");
    expect(ringSizeBytes({}, undefined)).toBe(DEFAULT_AUTO_RINGBUF_BYTES);
    expect(ringSizeBytes({ autoSizeBytes: 300_000 }, undefined)).toBe(512 * 1024);
    expect(ringSizeBytes({ autoSizeBytes: 300_000 }, 16 << 20)).toBe(16 << 20);
    // The default budget (250 exchanges/s): 250 x 4 records x 368 bytes = 368,000 bytes -> 512 KiB.
    expect(ringSizeBytes({ autoSizeBytes: httpRingAutoBytes(250) }, undefined)).toBe(512 * 1024);
    expect(ringSizeBytes({ autoSizeBytes: httpRingAutoBytes(10) }, undefined)).toBe(256 * 1024);
    expect(ringSizeBytes({ autoSizeBytes: httpRingAutoBytes(100_000) }, undefined)).toBe(8 << 20);
    // HTTP/2 forwarded at the default 50,000 records/s: a tenth of a second of 368-byte records = 1,840,000 bytes -> 2 MiB.
    expect(ringSizeBytes({ autoSizeBytes: httpRingAutoBytes(250, 50_000) }, undefined)).toBe(2 << 20);
    expect(ringSizeBytes({ autoSizeBytes: httpRingAutoBytes(100_000, 50_000) }, undefined)).toBe(8 << 20);
    expect(ringSizeBytes({ autoSizeBytes: httpRingAutoBytes(250, 1_000_000) }, undefined)).toBe(8 << 20);
  });
});
