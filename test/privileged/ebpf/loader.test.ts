/**
 * Privileged: the real kernel through the real libbpf. Loads the test-only probes object (one program per
 * attach kind), drives each attach point, reads maps and the ring buffer, sees kprobes come back
 * attached:false on this kernel (CONFIG_KPROBES off), and checks with bpftool that nothing stays behind.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { memlockLimit, mountFs, openBpfRuntime, raiseMemlock, type BpfRuntime } from "../../../ffi";
import { checkEnvironment, systemProbe } from "../../../src/ebpf/environment";
import { FeatureProbes } from "../../../src/ebpf/features";
import { loadProgramSet, type LoadedSet, type LoaderOptions } from "../../../src/ebpf/loader";
import type { ProgramSetSpec } from "../../../src/ebpf/spec";
import { bpftool, expectReleased, until } from "./helpers";

const ROOT = resolve(import.meta.dir, "../../..");
const PROBES_OBJECT = join(ROOT, "build/testdata/probes.bpf.o");
const TARGET_SOURCE = join(import.meta.dir, "fixtures/probe-target.c");
const MAGIC = 0xfeed_beefn;
const CALLS = 50;
const HIT = { tracepoint: 0, raw_tp: 1, perf_event: 2, uprobe: 3, kprobe: 4, tp_btf: 5 } as const;

interface ProbeEvent {
  magic: bigint;
  pid: number;
  kind: number;
}

const decodeProbeEvent = (v: DataView, o: number, len: number): ProbeEvent => {
  if (len < 16) throw new RangeError("short probe event");
  return { magic: v.getBigUint64(o, true), pid: v.getUint32(o + 8, true), kind: v.getUint32(o + 12, true) };
};

let runtime: BpfRuntime;
let dir: string;
let target: string;

function options(over: Partial<LoaderOptions> = {}): LoaderOptions {
  return {
    runtime,
    probes: new FeatureProbes(runtime),
    objectBytes: async () => new Uint8Array(readFileSync(PROBES_OBJECT)),
    ringbufSizeBytes: 1 << 16,
    useRingbuf: true,
    ...over,
  };
}

function hits(set: LoadedSet<unknown>, index: number): bigint {
  const v = set.object.map("hits")!.lookupU32Key(index);
  return v ? new DataView(v.buffer).getBigUint64(0, true) : 0n;
}

beforeAll(async () => {
  runtime = await openBpfRuntime(process.env);
  const env = checkEnvironment(systemProbe({ mountFs, memlockLimit, raiseMemlock }));
  if (env.blocked) throw new Error(`this machine should run eBPF: ${env.blocked}`);
  dir = mkdtempSync(join(tmpdir(), "svc-ebpf-priv-"));
  target = join(dir, "probe-target");
  const cc = Bun.spawnSync(["gcc", "-O1", "-g", "-o", target, TARGET_SOURCE]);
  if (cc.exitCode !== 0) throw new Error(`gcc failed: ${cc.stderr.toString()}`);
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe("loader on the real kernel", () => {
  test("tracepoint, raw_tp, tp_btf, perf_event and uprobe attach and fire; kprobe and a verifier-rejected program are attached:false; nothing left behind", async () => {
    const verifierLogs: string[] = [];
    const spec: ProgramSetSpec<ProbeEvent> = {
      name: "probes",
      object: "probes",
      programs: [
        { name: "tp_getppid", attach: { kind: "tracepoint", category: "syscalls", name: "sys_enter_getppid" }, required: true },
        { name: "raw_sys_enter", attach: { kind: "raw_tp", name: "sys_enter" }, required: false },
        { name: "btf_fork", attach: { kind: "tp_btf" }, required: false },
        { name: "on_cpu_clock", attach: { kind: "perf_event", event: "cpu-clock", frequencyHz: 1000 }, required: false },
        { name: "on_uprobe", attach: { kind: "uprobe", binary: target, func: "svc_probe_target" }, required: false },
        { name: "on_kprobe", attach: { kind: "kprobe", func: "do_nanosleep" }, required: false },
        { name: "bad_verifier", attach: { kind: "tracepoint", category: "syscalls", name: "sys_enter_getppid" }, required: false },
      ],
      ringBuffers: [{ map: "events", lostMap: "events_lost", decode: decodeProbeEvent }],
      constants: { magic: MAGIC },
    };
    const out = await loadProgramSet(spec, options({ onVerifierLog: (_p, log) => verifierLogs.push(log) }));
    if (!out.ok) throw out.error;
    const set = out.set;
    const by = (n: string) => set.programs.find((p) => p.name === n)!;
    try {
      for (const n of ["tp_getppid", "raw_sys_enter", "btf_fork", "on_cpu_clock", "on_uprobe"]) {
        expect({ name: n, attached: by(n).attached, reason: by(n).reason }).toEqual({ name: n, attached: true, reason: undefined });
        expect(by(n).id).toBeGreaterThan(0);
      }
      expect(by("on_kprobe")).toMatchObject({ attached: false, id: 0, type: "kprobe" });
      expect(by("on_kprobe").reason).toContain("ENOENT");
      expect(by("bad_verifier")).toMatchObject({ attached: false, id: 0 });
      expect(by("bad_verifier").reason).toContain("EACCES");
      expect(verifierLogs.join("\n")).toContain("invalid mem access");

      const loadedIds = bpftool("prog").map((p) => p.id);
      for (const p of set.programs.filter((p) => p.attached)) expect(loadedIds).toContain(p.id);

      const run = Bun.spawnSync([target, String(CALLS)]);
      expect(run.exitCode).toBe(0);
      const childPid = run.pid;

      const events: ProbeEvent[] = [];
      const reader = set.readers[0]!;
      await until(() => {
        reader.reader.consume((v, o, len) => events.push(reader.decode(v, o, len)));
        return events.filter((e) => e.pid === childPid).length >= CALLS;
      }, "ring buffer records of the target");
      const mine = events.filter((e) => e.pid === childPid);
      expect(mine.every((e) => e.magic === MAGIC && e.kind === HIT.tracepoint)).toBe(true);

      await until(() => hits(set, HIT.perf_event) > 0n, "cpu-clock samples");
      expect(hits(set, HIT.tracepoint)).toBeGreaterThanOrEqual(BigInt(CALLS));
      expect(hits(set, HIT.uprobe)).toBe(BigInt(CALLS));
      expect(hits(set, HIT.raw_tp)).toBeGreaterThan(0n);
      expect(hits(set, HIT.tp_btf)).toBeGreaterThan(0n);
      expect(hits(set, HIT.kprobe)).toBe(0n);

      const seen = set.object.map("seen_pids")!;
      expect(seen.typeName).toBe("hash");
      expect(seen.countEntries(1024)).toBeGreaterThanOrEqual(1);
      expect(seen.countEntries(0)).toBe(0);
      const counter = seen.entryCounter(1024);
      let steps = 1;
      while (!counter.step(1)) steps++;
      expect(counter.count).toBe(seen.countEntries(1024));
      expect(steps).toBeGreaterThanOrEqual(counter.count);
      expect(set.object.map("events_lost")!.sumPerCpuU64(0)).toBe(0n);
      expect(set.maps().map((m) => m.name).sort()).toEqual(["events", "events_lost", "hits", "seen_pids"]);
    } finally {
      const ids = set.programs.filter((p) => p.id > 0).map((p) => p.id);
      set.close();
      set.close();
      await expectReleased(ids);
    }
  });

  test("a uprobe on a function the binary lacks is attached:false with libbpf's reason; the others attach", async () => {
    const out = await loadProgramSet<ProbeEvent>(
      {
        name: "probes",
        object: "probes",
        programs: [
          { name: "on_uprobe", attach: { kind: "uprobe", binary: target, func: "no_such_function_here" }, required: false },
          { name: "raw_sys_enter", attach: { kind: "raw_tp", name: "sys_enter" }, required: true },
        ],
        ringBuffers: [],
      },
      options(),
    );
    if (!out.ok) throw out.error;
    const up = out.set.programs.find((p) => p.name === "on_uprobe")!;
    expect(up.attached).toBe(false);
    expect(up.reason).toContain("bpf_program__attach_uprobe_opts (on_uprobe) failed");
    expect(up.id).toBeGreaterThan(0);
    expect(out.set.programs.find((p) => p.name === "raw_sys_enter")!.attached).toBe(true);
    const ids = out.set.programs.map((p) => p.id);
    out.set.close();
    await expectReleased(ids);
  });

  test("a required tracepoint that does not exist fails the set and leaves nothing loaded", async () => {
    const out = await loadProgramSet<ProbeEvent>(
      {
        name: "probes",
        object: "probes",
        programs: [
          { name: "raw_sys_enter", attach: { kind: "raw_tp", name: "sys_enter" }, required: false },
          { name: "tp_getppid", attach: { kind: "tracepoint", category: "syscalls", name: "sys_enter_no_such_call" }, required: true },
        ],
        ringBuffers: [],
      },
      options(),
    );
    expect(out.ok).toBe(false);
    if (out.ok) return;
    expect(out.reason).toContain("required program tp_getppid failed to attach");
    expect(out.reason).toContain("ENOENT");
    expect(out.programs.every((p) => !p.attached && p.id === 0)).toBe(true);
  });
});
