import { describe, expect, test } from "bun:test";
import { FeatureProbes } from "../../../src/ebpf/features";
import { loadProgramSet, roundRingbufSize, type LoaderOptions } from "../../../src/ebpf/loader";
import type { ProgramSetSpec } from "../../../src/ebpf/spec";
import { FakeRuntime, type ProgramTemplate } from "../../helpers/fakes/ebpf";

const MAPS = [
  { name: "events", typeName: "ringbuf", maxEntries: 1 << 24 },
  { name: "events_lost", typeName: "percpu_array", maxEntries: 1, lost: 3n },
  { name: "events_perf", typeName: "perf_event_array", maxEntries: 0 },
  { name: "conns", typeName: "hash", maxEntries: 1024, entries: 7 },
  { name: "probes.rodata", typeName: "array", maxEntries: 1 },
];

const decode = (v: DataView, o: number) => v.getUint32(o, true);

function spec(programs: ProgramSetSpec<number>["programs"]): ProgramSetSpec<number> {
  return {
    name: "probes",
    object: "probes",
    programs,
    ringBuffers: [{ map: "events", lostMap: "events_lost", perfFallback: { map: "events_perf", constant: "use_perfbuf" }, decode }],
    constants: { target_tgid: 42 },
  };
}

const tp = { kind: "tracepoint", category: "sched", name: "sched_process_exec" } as const;

function setup(programs: ProgramTemplate[], opts: { exists?: (p: string) => boolean; useRingbuf?: boolean; ringbufSupported?: boolean } = {}) {
  const runtime = new FakeRuntime(programs, MAPS, ["target_tgid", "use_perfbuf"], opts.ringbufSupported ?? true);
  const verifierLogs: string[] = [];
  const options: LoaderOptions = {
    runtime,
    probes: new FeatureProbes(runtime, "6.18.0", opts.exists ?? (() => true)),
    objectBytes: async () => new Uint8Array(4),
    ringbufSizeBytes: 1 << 20,
    useRingbuf: opts.useRingbuf ?? true,
    onVerifierLog: (p, log) => verifierLogs.push(`${p}: ${log}`),
    cpuCount: 2,
  };
  return { runtime, options, verifierLogs };
}

describe("loadProgramSet", () => {
  test("sharedMaps: the first set loaded keeps its map, sets loaded later reuse it before their load", async () => {
    const { runtime, options } = setup([{ name: "a" }]);
    const shared = { ...spec([{ name: "a", attach: tp, required: true }]), sharedMaps: ["conns"] };
    const first = await loadProgramSet(shared, options);
    if (!first.ok) throw first.error;
    const kept = runtime.last.map("conns")!;
    expect(kept.reusedFd).toBeUndefined();
    expect(kept.keptFd).toBeNumber();
    const second = await loadProgramSet(shared, options);
    if (!second.ok) throw second.error;
    const reusing = runtime.last.map("conns")!;
    expect(reusing).not.toBe(kept);
    expect(reusing.reusedFd).toBe(kept.keptFd!);
    expect(reusing.reusedBeforeLoad).toBe(true);
    expect(reusing.keptFd).toBeUndefined();
    // A set that does not declare it keeps its own map.
    const plain = await loadProgramSet(spec([{ name: "a", attach: tp, required: true }]), options);
    if (!plain.ok) throw plain.error;
    expect(runtime.last.map("conns")!.reusedFd).toBeUndefined();
    for (const o of [first, second, plain]) o.set.close();
  });

  test("loads, sets constants and ring size, attaches every program, opens the ring buffer", async () => {
    const { runtime, options } = setup([{ name: "a" }, { name: "b" }, { name: "unused" }]);
    const out = await loadProgramSet(spec([{ name: "a", attach: tp, required: true }, { name: "b", attach: { kind: "raw_tp", name: "sys_enter" }, required: false }]), options);
    if (!out.ok) throw out.error;
    const obj = runtime.last;
    expect(obj.constants).toEqual({ target_tgid: 42, use_perfbuf: 0 });
    expect(obj.map("events")!.maxEntries).toBe(1 << 20);
    expect(obj.program("unused")!.autoload).toBe(false);
    expect(out.set.programs.map((p) => [p.name, p.type, p.attached, p.id > 0])).toEqual([["a", "tracepoint", true, true], ["b", "raw_tp", true, true]]);
    expect(out.set.readers.map((r) => [r.map, r.kind, r.sizeBytes])).toEqual([["events", "ringbuf", 1 << 20]]);
    expect(out.set.maps().map((m) => m.name)).toEqual(["events", "events_lost", "events_perf", "conns"]);
    out.set.close();
    expect(obj.closed).toBe(true);
    expect(obj.program("a")!.links.every((l) => l.closed)).toBe(true);
    expect(obj.map("events")!.reader!.closed).toBe(true);
  });

  test("an optional program that fails to attach is attached:false with the reason; the others attach", async () => {
    const { options } = setup([{ name: "a" }, { name: "k", failAttach: { op: "bpf_program__attach_kprobe", errno: 2 } }, { name: "c" }]);
    const out = await loadProgramSet(spec([{ name: "a", attach: tp, required: true }, { name: "k", attach: tp, required: false }, { name: "c", attach: tp, required: false }]), options);
    if (!out.ok) throw out.error;
    const k = out.set.programs.find((p) => p.name === "k")!;
    expect(k.attached).toBe(false);
    expect(k.reason).toContain("ENOENT");
    expect(k.id).toBeGreaterThan(0);
    expect(out.set.programs.filter((p) => p.attached).map((p) => p.name)).toEqual(["a", "c"]);
  });

  test("a required program that fails to attach fails the set and releases what was attached", async () => {
    const { runtime, options } = setup([{ name: "a" }, { name: "r", failAttach: { op: "bpf_program__attach_tracepoint", errno: 1 } }]);
    const out = await loadProgramSet(spec([{ name: "a", attach: tp, required: false }, { name: "r", attach: tp, required: true }]), options);
    expect(out.ok).toBe(false);
    if (out.ok) return;
    expect(out.reason).toContain("required program r failed to attach");
    expect(out.reason).toContain("EPERM");
    expect(runtime.last.closed).toBe(true);
    expect(runtime.last.program("a")!.links.every((l) => l.closed)).toBe(true);
    expect(out.programs.every((p) => !p.attached && p.reason)).toBe(true);
  });

  test("an optional program the verifier rejects is left out and the object loaded again; its log is kept", async () => {
    const { runtime, options, verifierLogs } = setup([{ name: "a" }, { name: "bad", failLoad: { errno: 13, verifierLog: "R0 invalid mem access 'map_value_or_null'" } }]);
    const out = await loadProgramSet(spec([{ name: "a", attach: tp, required: true }, { name: "bad", attach: tp, required: false }]), options);
    if (!out.ok) throw out.error;
    // The quiet load fails without a log, a verbose one on a fresh object says why, the third loads without "bad".
    expect(runtime.opened.map((o) => [o.loadedQuietly, o.closed])).toEqual([
      [true, true],
      [false, true],
      [true, false],
    ]);
    const bad = out.set.programs.find((p) => p.name === "bad")!;
    expect(bad).toMatchObject({ attached: false, id: 0 });
    expect(bad.reason).toContain("EACCES");
    expect(verifierLogs).toEqual(["bad: R0 invalid mem access 'map_value_or_null'"]);
    expect(out.set.programs.find((p) => p.name === "a")!.attached).toBe(true);
  });

  test("objects load quietly first; one whose quiet load fails (a signal storm) loads verbosely on a fresh copy", async () => {
    const { runtime, options } = setup([{ name: "a" }]);
    runtime.quietFailures = 1;
    const out = await loadProgramSet(spec([{ name: "a", attach: tp, required: true }]), options);
    if (!out.ok) throw out.error;
    expect(runtime.opened.map((o) => [o.loadedQuietly, o.closed, o.loaded])).toEqual([
      [true, true, false],
      [false, false, true],
    ]);
    expect(out.set.programs[0]).toMatchObject({ name: "a", attached: true });
    const again = await loadProgramSet(spec([{ name: "a", attach: tp, required: true }]), options);
    if (!again.ok) throw again.error;
    expect(runtime.last.loadedQuietly).toBe(true);
  });

  test("with libbpf's log going to a sink, loads are verbose at once: a rejected program is not loaded twice to learn why", async () => {
    const { runtime, options, verifierLogs } = setup([{ name: "a" }, { name: "bad", failLoad: { errno: 13, verifierLog: "log" } }]);
    runtime.setLogSink(() => {});
    const out = await loadProgramSet(spec([{ name: "a", attach: tp, required: true }, { name: "bad", attach: tp, required: false }]), options);
    if (!out.ok) throw out.error;
    expect(runtime.opened.map((o) => [o.loadedQuietly, o.closed])).toEqual([
      [false, true],
      [false, false],
    ]);
    expect(verifierLogs).toEqual(["bad: log"]);
  });

  test("a required program the verifier rejects fails the set", async () => {
    const { options, verifierLogs } = setup([{ name: "bad", failLoad: { errno: 13, verifierLog: "log" } }]);
    const out = await loadProgramSet(spec([{ name: "bad", attach: tp, required: true }]), options);
    expect(out.ok).toBe(false);
    if (!out.ok) expect(out.reason).toContain("required program bad failed to load");
    expect(verifierLogs.length).toBe(1);
  });

  test("kprobes on a kernel without them: attached:false with ENOENT, never loaded, others go on", async () => {
    const noKprobes = (p: string) => !p.includes("kprobe");
    const { runtime, options } = setup([{ name: "a" }, { name: "kp" }], { exists: noKprobes });
    const out = await loadProgramSet(spec([{ name: "a", attach: tp, required: true }, { name: "kp", attach: { kind: "kprobe", func: "tcp_connect" }, required: false }]), options);
    if (!out.ok) throw out.error;
    const kp = out.set.programs.find((p) => p.name === "kp")!;
    expect(kp).toMatchObject({ attached: false, id: 0, type: "kprobe" });
    expect(kp.reason).toContain("ENOENT");
    expect(runtime.last.program("kp")!.autoload).toBe(false);
    expect(options.probes.attachKind("kretprobe")).toBe(options.probes.attachKind("kprobe"));
  });

  test("without ring buffers the perf fallback is read and the BPF side told so", async () => {
    const { runtime, options } = setup([{ name: "a" }], { useRingbuf: false, ringbufSupported: false });
    const out = await loadProgramSet(spec([{ name: "a", attach: tp, required: true }]), options);
    if (!out.ok) throw out.error;
    expect(runtime.last.constants.use_perfbuf).toBe(1);
    expect(runtime.last.map("events")!.autocreate).toBe(false);
    expect(out.set.readers.map((r) => [r.map, r.kind])).toEqual([["events_perf", "perfbuf"]]);
    expect(runtime.last.map("events_perf")!.perfPageCount).toBe(128);
  });

  test("a spec naming a program the object lacks fails clearly", async () => {
    const { options } = setup([{ name: "a" }]);
    const out = await loadProgramSet(spec([{ name: "missing", attach: tp, required: true }]), options);
    expect(out.ok).toBe(false);
    if (!out.ok) expect(out.reason).toContain("no program missing in probes");
  });

  test("mapSizes set max_entries before load; an unknown map is an error", async () => {
    const { runtime, options } = setup([{ name: "a" }]);
    const out = await loadProgramSet({ ...spec([{ name: "a", attach: tp, required: true }]), mapSizes: { conns: 4096 } }, options);
    if (!out.ok) throw out.error;
    expect(runtime.last.map("conns")!.maxEntries).toBe(4096);
    const bad = await loadProgramSet({ ...spec([{ name: "a", attach: tp, required: true }]), mapSizes: { nope: 1 } }, options);
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.reason).toContain("no map nope");
  });

  test("roundRingbufSize rounds up to a power of two of at least a page", () => {
    expect(roundRingbufSize(1)).toBe(4096);
    expect(roundRingbufSize(16 * 1024 * 1024)).toBe(16 * 1024 * 1024);
    expect(roundRingbufSize(10_000_000)).toBe(16 * 1024 * 1024);
  });
});
