/**
 * CPU profiling against the real kernel: the profile program set attached on the cpu-clock of every CPU,
 * in-kernel counts read by the collector, stacks symbolized. The first test exports through the real OTLP
 * pipeline to an in-process OTLP/gRPC receiver and reads the exported profiles back from the wire; the others
 * read the collector's submissions to a recording pipeline. The pprof output is read back by pprof-format and,
 * when installed, by `go tool pprof`.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { Profile } from "pprof-format";
import { ProfilingCollector } from "../../../src/collectors/profiling";
import type { ProfileItem } from "../../../src/export/model";
import { RecordingPipeline, fakeContext, recordingHost, waitFor } from "../../helpers/fakes/collectors";
import type { AgentContext } from "../../../src/collectors/context";
import { createExport } from "../../../src/export";
import type { TelemetryPipeline } from "../../../src/export/types";
import { OtlpReceiver, decodeRequest, type ReceivedRequest } from "../../../src/export/receiver";

const FIXTURE = join(import.meta.dir, "../../fixtures/cpu-burner.c");
const dir = mkdtempSync(join(tmpdir(), "svc-profiling-"));
const burner = join(dir, "cpu-burner");
const children: Array<ReturnType<typeof Bun.spawn>> = [];
const isRoot = process.getuid?.() === 0;

beforeAll(() => {
  const r = Bun.spawnSync(["gcc", "-O0", "-g", "-fno-omit-frame-pointer", "-o", burner, FIXTURE]);
  if (r.exitCode !== 0) throw new Error(`gcc failed: ${r.stderr.toString()}`);
});

afterAll(() => {
  for (const c of children) c.kill(9);
  rmSync(dir, { recursive: true, force: true });
});

/** Spawns a process and resolves once it printed "ready", with the lines before it. */
async function spawnReady(cmd: string[], env: Record<string, string> = {}): Promise<{ pid: number; lines: string[] }> {
  const child = Bun.spawn(cmd, { stdout: "pipe", stderr: "inherit", env: { ...process.env, ...env } });
  children.push(child);
  const reader = child.stdout.getReader();
  let text = "";
  const deadline = performance.now() + 10_000;
  while (!text.split("\n").includes("ready")) {
    if (performance.now() > deadline) throw new Error(`${cmd.join(" ")} did not print ready`);
    const { value, done } = await reader.read();
    if (done) throw new Error(`${cmd.join(" ")} exited before ready`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return { pid: child.pid, lines: text.split("\n") };
}

/** Starts a collector on `pid` and collects until `enough` holds for that process's profile (bounded). */
const PROFILING_YAML = "agent:\n  profiling:\n    enabled: true\n    sample_rate: 99\n    interval: 1h\n";

async function profile(
  pid: number,
  enough: (samples: ProfileItem["samples"]) => boolean,
  ctx: AgentContext = fakeContext(PROFILING_YAML),
): Promise<{ items: ProfileItem[]; collector: ProfilingCollector }> {
  const collector = new ProfilingCollector(ctx, { core: ctx.ebpf, targetPid: pid });
  const host = recordingHost();
  await collector.start(host);
  try {
    await waitFor("the profile program to attach", () => host.states.some((s) => s.state === "ok" || s.state === "permanent_error"));
    expect(host.last()).toEqual({ state: "ok", reason: undefined });
    const samples: ProfileItem["samples"] = [];
    const items: ProfileItem[] = [];
    const deadline = performance.now() + 15_000;
    while (!enough(samples)) {
      if (performance.now() > deadline) throw new Error(`not enough samples for pid ${pid}: ${samples.length} stacks`);
      await Bun.sleep(200);
      for (const item of collector.collect()) {
        expect(item.resource?.["process.pid"]).toBe(pid);
        items.push(item);
        samples.push(...item.samples);
      }
    }
    if (ctx.pipeline instanceof RecordingPipeline) expect(ctx.pipeline.accepted.profiles.length).toBe(items.length);
    return { items, collector };
  } finally {
    await collector.shutdown();
  }
}

const total = (samples: ProfileItem["samples"]) => samples.reduce((n, s) => n + s.value, 0);

/** Sample weight by leaf function. */
function leaves(items: ProfileItem[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const i of items) for (const s of i.samples) out.set(s.stack[0]!.function, (out.get(s.stack[0]!.function) ?? 0) + s.value);
  return out;
}

/** Sample weight by leaf function name, decoded from OTLP profiles requests as received. */
function exportedLeaves(requests: ReceivedRequest[]): Map<string, number> {
  const out = new Map<string, number>();
  type Doc = {
    resourceProfiles?: Array<{ scopeProfiles?: Array<{ profiles?: Array<{ samples?: Array<{ stackIndex?: number; values?: string[] }> }> }> }>;
    dictionary?: {
      stackTable?: Array<{ locationIndices?: number[] }>;
      locationTable?: Array<{ lines?: Array<{ functionIndex?: number }> }>;
      functionTable?: Array<{ nameStrindex?: number }>;
      stringTable?: string[];
    };
  };
  for (const r of requests) {
    const doc = decodeRequest("profiles", r.body) as Doc;
    const d = doc.dictionary!;
    for (const rp of doc.resourceProfiles ?? [])
      for (const sp of rp.scopeProfiles ?? [])
        for (const p of sp.profiles ?? [])
          for (const s of p.samples ?? []) {
            const loc = d.locationTable![d.stackTable![s.stackIndex ?? 0]!.locationIndices![0]!]!;
            const fn = d.functionTable![loc.lines![0]!.functionIndex ?? 0]!;
            const name = d.stringTable![fn.nameStrindex ?? 0]!;
            out.set(name, (out.get(name) ?? 0) + Number(s.values![0]));
          }
  }
  return out;
}

function top(m: Map<string, number>): string {
  return [...m.entries()].sort((a, b) => b[1] - a[1])[0]![0];
}

describe.skipIf(!isRoot)("CPU profiling (real kernel)", () => {
  test("a C program burning CPU in a known function has that function at the top of the exported profile, with its callers and binary", async () => {
    const { pid } = await spawnReady([burner]);
    const requests: ReceivedRequest[] = [];
    const rx = new OtlpReceiver({ listen: "127.0.0.1:0", onRequest: (r) => void requests.push(r) });
    const port = await rx.start();
    const base = fakeContext(PROFILING_YAML + `otlp:\n  endpoint: 127.0.0.1:${port}\n  compression: gzip\n`);
    const exporter = createExport(base);
    for (const c of exporter.components) await c.start(recordingHost());
    let items: ProfileItem[];
    let collector: ProfilingCollector;
    const exportedTotal = () => [...exportedLeaves(requests.filter((r) => r.signal === "profiles")).values()].reduce((a, b) => a + b, 0);
    // Counts every profile sample handed to the real pipeline (the collector's final period at shutdown included).
    const real = exporter.pipeline;
    let submitted = 0;
    const pipeline: TelemetryPipeline = {
      submit: (signal, batch) => {
        if (signal === "profiles") submitted += total((batch as ProfileItem[]).flatMap((i) => i.samples));
        return real.submit(signal, batch);
      },
      flush: (ms) => real.flush(ms),
      setResourceAttributes: (source, attributes) => real.setResourceAttributes(source, attributes),
    };
    try {
      ({ items, collector } = await profile(pid, (s) => total(s) >= 100, { ...base, pipeline }));
      await real.flush(10_000);
      await waitFor("every sample at the receiver", () => exportedTotal() >= submitted, 20_000);
      expect(exportedTotal()).toBe(submitted);
      expect(submitted).toBeGreaterThanOrEqual(total(items.flatMap((i) => i.samples)));
    } finally {
      for (const c of exporter.components) await c.shutdown(AbortSignal.timeout(5000));
      await rx.stop();
    }
    const exported = exportedLeaves(requests.filter((r) => r.signal === "profiles"));
    expect(top(exported)).toBe("burn_cpu_in_known_function");
    const byLeaf = leaves(items);
    expect(top(byLeaf)).toBe("burn_cpu_in_known_function");
    expect(byLeaf.get("burn_cpu_in_known_function")! / total(items.flatMap((i) => i.samples))).toBeGreaterThan(0.9);
    const hot = items.flatMap((i) => i.samples).find((s) => s.stack[0]!.function === "burn_cpu_in_known_function")!;
    expect(hot.stack.slice(0, 3).map((f) => f.function)).toEqual(["burn_cpu_in_known_function", "caller_of_burn", "main"]);
    expect(hot.stack[0]!.binary).toBe(burner);
    expect(items[0]!.resource).toMatchObject({ "process.pid": pid, "process.executable.name": "cpu-burner" });
    expect(items[0]!.period).toBe(Math.round(1e9 / 99));
    // The collector's count also holds the final period submitted at shutdown (at most one more profile).
    expect(collector.profilesCollected - items.length).toBeOneOf([0, 1]);

    // The same period as pprof, read back by an independent decoder and (when installed) by go tool pprof.
    const pprof = collector.latestPprof()!;
    const decoded = Profile.decode(gunzipSync(pprof));
    const names = decoded.function.map((f) => decoded.stringTable.strings[Number(f.name)]);
    expect(names).toContain("burn_cpu_in_known_function");
    const file = join(dir, "cpu.pb.gz");
    writeFileSync(file, pprof);
    if (Bun.which("go")) {
      const go = Bun.spawnSync(["go", "tool", "pprof", "-top", file], { env: { ...process.env, HOME: dir } });
      expect(go.stderr.toString()).not.toContain("parsing profile");
      expect(go.exitCode).toBe(0);
      expect(go.stdout.toString()).toMatch(/\d+(\.\d+)?%\s+burn_cpu_in_known_function/);
    }
  }, 30_000);

  test("time spent in the kernel shows kernel frames from kallsyms above the user frames", async () => {
    const { pid } = await spawnReady([burner, "syscall"]);
    const { items } = await profile(pid, (s) => total(s) >= 60);
    const samples = items.flatMap((i) => i.samples);
    const withKernel = samples.filter((s) => s.stack[0]!.binary === "[kernel.kallsyms]");
    expect(total(withKernel)).toBeGreaterThan(0);
    const kernelNames = new Set(withKernel.flatMap((s) => s.stack.filter((f) => f.binary === "[kernel.kallsyms]").map((f) => f.function)));
    expect([...kernelNames].some((n) => /^(entry_SYSCALL_64|do_syscall_64|x64_sys_call|__x64_sys_getppid)/.test(n))).toBe(true);
    // Below the kernel frames: the user stack of the same sample, libc's syscall() named from libc's .dynsym.
    // (libc's syscall() keeps no frame pointer, so the frame-pointer walk skips its caller spin_in_syscalls.)
    const s = withKernel.find((x) => x.stack.some((f) => f.function === "syscall"))!;
    const firstUser = s.stack.findIndex((f) => f.binary !== "[kernel.kallsyms]");
    expect(firstUser).toBeGreaterThan(0);
    const user = s.stack.slice(firstUser);
    expect(user[0]).toMatchObject({ function: "syscall" });
    expect(user[0]!.binary).toMatch(/libc\.so\.6$/);
    expect(user.map((f) => f.function)).toContain("main");
  }, 30_000);

  test("code in anonymous executable memory is named through the process's /tmp/perf-<pid>.map", async () => {
    const { pid, lines } = await spawnReady([burner, "jit"]);
    const address = lines[0]!;
    writeFileSync(`/tmp/perf-${pid}.map`, `${address} 2 jit_spin_loop\n`);
    try {
      const { items } = await profile(pid, (s) => total(s) >= 50);
      const leaf = items.flatMap((i) => i.samples).map((s) => s.stack[0]!);
      expect(top(leaves(items))).toBe("jit_spin_loop");
      expect(leaf.find((f) => f.function === "jit_spin_loop")!.binary).toBe("[jit]");
    } finally {
      rmSync(`/tmp/perf-${pid}.map`, { force: true });
    }
  }, 30_000);

  test("a Bun process' JavaScript frames resolve through the jitdump Bun writes (BUN_JSC_useJITDump=1)", async () => {
    const script = join(dir, "hot.js");
    writeFileSync(
      script,
      `function svcHotLoop(n) { let s = 0; for (let i = 0; i < n; i++) s += Math.sqrt(i) * i % 7; return s; }\n` +
        `console.log("ready");\nfor (;;) svcHotLoop(1e6);\n`,
    );
    const { pid } = await spawnReady([process.execPath, script], { BUN_JSC_useJITDump: "1", BUN_JSC_jitDumpDirectory: dir });
    const named = (s: ProfileItem["samples"]) => total(s.filter((x) => x.stack.some((f) => f.function.includes("svcHotLoop"))));
    const { items } = await profile(pid, (s) => named(s) >= 30);
    const hot = items.flatMap((i) => i.samples).filter((s) => s.stack.some((f) => f.function.includes("svcHotLoop")));
    const frame = hot[0]!.stack.find((f) => f.function.includes("svcHotLoop"))!;
    expect(frame.binary).toBe("[jit]");
    expect(frame.function).toMatch(/^JSC-(Baseline|DFG|FTL|LLInt)[^:]*: svcHotLoop/);
  }, 30_000);
});
