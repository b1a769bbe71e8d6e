/**
 * Profiling overhead: the compiled agent profiling at 99 Hz per CPU while a C program
 * (test/fixtures/cpu-burner.c) burns one CPU, exporting each period's profiles to an OTLP receiver in this
 * process; once profiling every process of the host (whatever else runs on it), once only the CPU-bound
 * process (agent.profiling.pid). Figures: the agent's CPU (user+system from /proc/<pid>/stat) over the measured window as a share of
 * one CPU, with profiling on, against the same agent configuration with profiling off (the reference, same run);
 * the in-kernel cost of the BPF program per sample (kernel.bpf_stats_enabled, charged to the profiled tasks,
 * not to the agent); and the samples and profiles the receiver got.
 *   bun run build && bun bench/profiling.ts [seconds]
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { OtlpReceiver, decodeRequest } from "../src/export/receiver";
import { BPF_STATS_PATH, startAgent } from "./lib/agent";
import { report } from "./lib/report";
import { cpuSeconds } from "./lib/proc";
import { quietConfig } from "../test/helpers/quiet-config";

const WINDOW_S = Number(process.argv[2] ?? 40);
const SAMPLE_RATE_HZ = 99;
/** The default agent.profiling.interval. */
const INTERVAL = "10s";
const TARGET_PERCENT = 2;
/** Past the first period, whose one-time work (kallsyms, first ELF symbol tables) is reported apart. */
const SETTLE_MS = 13_000;

/** run_time_ns and run_cnt of the loaded program named profile_cpu (bpftool), when stats are on. */
function programStats(): { ns: number; runs: number } | undefined {
  const r = Bun.spawnSync(["bpftool", "-j", "prog", "show", "name", "profile_cpu"]);
  if (r.exitCode !== 0) return undefined;
  const text = r.stdout.toString().trim();
  const list = (text.startsWith("[") ? JSON.parse(text) : [JSON.parse(text)]) as Array<{ run_time_ns?: number; run_cnt?: number }>;
  const p = list.at(-1);
  return p?.run_cnt !== undefined ? { ns: p.run_time_ns ?? 0, runs: p.run_cnt } : undefined;
}

const dir = mkdtempSync(join(tmpdir(), "svc-bench-profiling-"));
const burner = join(dir, "cpu-burner");
const cc = Bun.spawnSync(["gcc", "-O0", "-g", "-fno-omit-frame-pointer", "-o", burner, resolve(import.meta.dir, "../test/fixtures/cpu-burner.c")]);
if (cc.exitCode !== 0) throw new Error(`gcc failed: ${cc.stderr.toString()}`);
const burn = Bun.spawn([burner], { stdout: "ignore" });

let samples = 0;
let profiles = 0;
let burnerTop = 0;
const rx = new OtlpReceiver({
  listen: "127.0.0.1:0",
  onRequest: (r) => {
    if (r.signal !== "profiles") return;
    profiles += r.items;
    const doc = decodeRequest("profiles", r.body) as {
      resourceProfiles?: Array<{ scopeProfiles?: Array<{ profiles?: Array<{ samples?: Array<{ values?: string[] }> }> }> }>;
      dictionary?: { stringTable?: string[] };
    };
    for (const rp of doc.resourceProfiles ?? []) for (const sp of rp.scopeProfiles ?? []) for (const p of sp.profiles ?? []) for (const s of p.samples ?? []) samples += Number(s.values?.[0] ?? 0);
    if (doc.dictionary?.stringTable?.includes("burn_cpu_in_known_function")) burnerTop++;
  },
});
const port = await rx.start();

const config = (profiling: boolean, pid = 0) =>
  quietConfig({
    endpoint: `127.0.0.1:${port}`,
    ebpf: "    enabled: true\n    network:\n      enabled: false",
    agent: `  profiling:\n    enabled: ${profiling}\n    sample_rate: ${SAMPLE_RATE_HZ}\n    interval: ${INTERVAL}\n    pid: ${pid}`,
  });

async function measure(profiling: boolean, pid = 0): Promise<{ percent: number; cpuS: number; startupCpuS: number; bpf?: { ns: number; runs: number } }> {
  const agent = await startAgent(config(profiling, pid));
  await Bun.sleep(SETTLE_MS);
  const bpf0 = profiling ? programStats() : undefined;
  const c0 = cpuSeconds(agent.pid);
  const startupCpuS = c0;
  const t0 = performance.now();
  await Bun.sleep(WINDOW_S * 1000);
  const cpuS = cpuSeconds(agent.pid) - c0;
  const wallS = (performance.now() - t0) / 1000;
  const bpf1 = profiling ? programStats() : undefined;
  await agent.stop();
  const bpf = bpf0 && bpf1 ? { ns: bpf1.ns - bpf0.ns, runs: bpf1.runs - bpf0.runs } : undefined;
  return { percent: (cpuS / wallS) * 100, cpuS, startupCpuS, bpf };
}

let statsWas = "0";
try {
  statsWas = readFileSync(BPF_STATS_PATH, "utf8").trim();
  writeFileSync(BPF_STATS_PATH, "1");
} catch {
  // Not root or no sysctl: the in-kernel figure is left out.
}
try {
  const off = await measure(false);
  const on = await measure(true);
  const only = await measure(true, burn.pid);
  const rows = [
    {
      name: `agent CPU profiling only the CPU-bound process at ${SAMPLE_RATE_HZ} Hz (agent.profiling.pid)`,
      agent: only.percent,
      reference: off.percent,
      referenceName: "same agent, profiling off",
      unit: "% of one CPU",
      target: `< ${TARGET_PERCENT}%`,
      met: only.percent < TARGET_PERCENT,
    },
    {
      name: `agent CPU profiling every process of this host at ${SAMPLE_RATE_HZ} Hz (window ${WINDOW_S} s)`,
      agent: on.percent,
      reference: off.percent,
      referenceName: "same agent, profiling off",
      unit: "% of one CPU",
      target: `< ${TARGET_PERCENT}%`,
      met: on.percent < TARGET_PERCENT,
    },
    { name: "agent CPU attributable to profiling every process (on - off)", agent: on.percent - off.percent, unit: "% of one CPU", target: `< ${TARGET_PERCENT}%`, met: on.percent - off.percent < TARGET_PERCENT },
    { name: "samples received over OTLP (whole run incl. settle and final period)", agent: samples, unit: "samples" },
    { name: "profiles received over OTLP", agent: profiles, unit: "profiles" },
  ];
  if (on.bpf && on.bpf.runs > 0) {
    rows.push({ name: "BPF program cost per sample (in the profiled task's context)", agent: on.bpf.ns / on.bpf.runs, unit: "ns/sample" });
    rows.push({ name: "BPF program CPU over the window (both CPUs)", agent: (on.bpf.ns / 1e9 / WINDOW_S) * 100, unit: "% of one CPU" });
  }
  report({
    bench: `bench/profiling.ts: CPU profiling overhead, ${SAMPLE_RATE_HZ} Hz per CPU, one CPU-bound C process, interval ${INTERVAL}`,
    rows,
    notes: [
      `periods containing burn_cpu_in_known_function: ${burnerTop}`,
      `agent CPU seconds in the window: on ${on.cpuS.toFixed(2)}, off ${off.cpuS.toFixed(2)}`,
      `agent CPU seconds from start to the window (start-up and first period): on ${on.startupCpuS.toFixed(2)}, off ${off.startupCpuS.toFixed(2)}`,
      `processes on the machine while measuring: ${Bun.spawnSync(["sh", "-c", "ls -d /proc/[0-9]* | wc -l"]).stdout.toString().trim()}; load average ${readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`,
    ],
  });
} finally {
  try {
    writeFileSync(BPF_STATS_PATH, statsWas);
  } catch {
    // See above.
  }
  burn.kill(9);
  await rx.stop();
  rmSync(dir, { recursive: true, force: true });
}
