/**
 * `bun run bench`: runs every benchmark in bench/ (each bounded, the whole run under 30 minutes), streams their
 * output, collects their `BENCH-RESULT` lines (or parses the table of a benchmark that prints none, see
 * lib/collect.ts), and writes BENCHMARKS.md: per benchmark the agent's figure, the reference measured in the
 * same run, the ratio, the target and whether it was met; the machine (CPU model, cores, kernel), the date, the
 * load average at start and end, the exact command of each benchmark; curves as tables and PNG charts
 * (bench/charts/); and every benchmark's raw output. Benchmarks added to bench/ later are run too, with no
 * arguments and the default time limit.
 *
 * Usage: bun run bench [--quick] [--only a,b] [--skip a,b] [--out FILE] [--budget SECONDS] [--list]
 *   --quick: short durations (to check the runner; the report says so).
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg, release } from "node:os";
import { join, relative, resolve } from "node:path";
import { collect, RESULT_PREFIX } from "./lib/collect";
import type { BenchResultWithCurves, Curve } from "./lib/curves";
import { renderChart } from "./lib/png-chart";
import type { BenchRow } from "./lib/report";
import { argText } from "./lib/args";

const ROOT = resolve(import.meta.dir, "..");
const BENCH_DIR = import.meta.dir;
const BINARY = join(ROOT, "dist/svc-agent");
const CHART_DIR = join(BENCH_DIR, "charts");
const DEFAULT_OUT = join(ROOT, "BENCHMARKS.md");
const TOTAL_BUDGET_S = 1800;
/** Kept back from the budget for building the report and stopping a benchmark that overran. */
const RESERVE_S = 10;
const DEFAULT_TIMEOUT_S = 90;
/** Kept back from a self-limiting benchmark's limit for its own teardown and report. */
const SELF_LIMIT_MARGIN_S = 15;
const KILL_GRACE_MS = 3000;
/** A benchmark that printed a BENCH-RESULT line and then stays silent this long without exiting is stopped. */
const QUIET_AFTER_RESULT_S = 15;
/** Load average (1 min) per core above which the report warns that the machine was busy. */
const BUSY_LOAD_PER_CORE = 0.5;
const RUNNER_FILES = new Set(["run.ts"]);

interface Plan {
  /** File stem in bench/. */
  name: string;
  args: string[];
  quickArgs: string[];
  /** Upper bound of this benchmark's run time. */
  timeoutS: number;
  /** Needs root (eBPF). */
  root?: boolean;
  /**
   * The benchmark's option that bounds its own run time in seconds: it is given the time this run can still spare
   * (its limit less a margin for stopping), so a benchmark that fills its time stops itself with a result instead
   * of being stopped without one when the benchmarks before it took longer than usual.
   */
  selfLimitFlag?: string;
}

/** Arguments per benchmark: each bounded by its timeoutS; their sum stays under TOTAL_BUDGET_S on 2 cores. */
const PLANS: Plan[] = [
  // --idle 15: the every-subsystem agent's idle reading comes after src/cli/run.ts releases its start-up pages (10 s after the start).
  { name: "footprint", args: ["--idle", "15", "--load", "10", "--starts", "3", "--settle", "2", "--defaults-idle", "60", "--defaults-recheck", "0"], quickArgs: ["--idle", "2", "--load", "3", "--starts", "1", "--settle", "1", "--defaults-idle", "3", "--defaults-recheck", "0"], timeoutS: 210, root: true },
  { name: "scaling", args: [], quickArgs: ["--min-ms", "50", "--series", "1000,10000"], timeoutS: 60 },
  { name: "http", args: [], quickArgs: ["--seconds", "1", "--rounds", "1"], timeoutS: 200 },
  { name: "export", args: ["--spans", "100000", "--rounds", "5"], quickArgs: ["--spans", "10000", "--rounds", "1"], timeoutS: 90 },
  { name: "scaling-export", args: ["--spans", "30000"], quickArgs: ["--spans", "5000", "--batches", "64,512,4096"], timeoutS: 60 },
  { name: "ringbuf", args: ["--ms", "2000"], quickArgs: ["--ms", "500"], timeoutS: 60, root: true },
  { name: "discovery", args: [], quickArgs: ["--sizes", "10,1000"], timeoutS: 90 },
  { name: "logs", args: ["300000"], quickArgs: ["50000"], timeoutS: 60 },
  { name: "debug-overhead", args: ["--seconds", "2", "--ops", "50000", "--rounds", "2"], quickArgs: ["--seconds", "1", "--ops", "20000", "--rounds", "1"], timeoutS: 90 },
  { name: "profiling", args: ["10"], quickArgs: ["4"], timeoutS: 90, root: true },
  { name: "http-overhead", args: [], quickArgs: ["--seconds", "1", "--rounds", "1", "--warmup", "5"], timeoutS: 255, root: true, selfLimitFlag: "--max-seconds" },
  { name: "tls-overhead", args: [], quickArgs: ["--seconds", "1", "--rounds", "1", "--warmup", "2", "--max-warmup", "2"], timeoutS: 250, root: true, selfLimitFlag: "--max-seconds" },
  { name: "h2-overhead", args: [], quickArgs: ["--seconds", "1", "--rounds", "1", "--warmup", "2", "--max-warmup", "2"], timeoutS: 330, root: true },
  { name: "span-cost", args: ["--exchanges", "50000", "--rounds", "9"], quickArgs: ["--exchanges", "5000", "--rounds", "1", "--warmup", "20000"], timeoutS: 120 },
  { name: "http-server-choice", args: ["--seconds", "2", "--rounds", "6"], quickArgs: ["--seconds", "1", "--rounds", "1"], timeoutS: 60 },
  { name: "red", args: ["--seconds", "2", "--rounds", "6", "--warmup", "5"], quickArgs: ["--seconds", "1", "--rounds", "1", "--warmup", "2", "--max-warmup", "2"], timeoutS: 420, root: true },
];

const QUICK = process.argv.includes("--quick");
const ONLY = argText("only")?.split(",");
const SKIP = new Set(argText("skip")?.split(",") ?? []);
const OUT = resolve(argText("out") ?? DEFAULT_OUT);
const BUDGET_S = Number(argText("budget") ?? TOTAL_BUDGET_S);

/** The benchmarks in bench/: planned ones first (in plan order), then any other bench/*.ts with defaults. */
function discover(): Plan[] {
  const files = readdirSync(BENCH_DIR)
    .filter((f) => f.endsWith(".ts") && !RUNNER_FILES.has(f))
    .map((f) => f.slice(0, -3));
  const planned = PLANS.filter((p) => files.includes(p.name));
  const extra = files.filter((f) => !PLANS.some((p) => p.name === f)).sort();
  return [...planned, ...extra.map((name) => ({ name, args: [], quickArgs: [], timeoutS: DEFAULT_TIMEOUT_S }))].filter(
    (p) => (!ONLY || ONLY.includes(p.name)) && !SKIP.has(p.name),
  );
}

interface Machine {
  cpuModel: string;
  cores: number;
  kernel: string;
  bun: string;
  agentVersion: string;
  memTotalMb: number;
}

function machine(): Machine {
  const cpuinfo = readFileSync("/proc/cpuinfo", "utf8");
  const model = /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1] ?? cpus()[0]?.model ?? "unknown";
  const mem = /^MemTotal:\s+(\d+) kB/m.exec(readFileSync("/proc/meminfo", "utf8"));
  const version = existsSync(BINARY) ? Bun.spawnSync([BINARY, "version"]).stdout.toString().trim().split("\n").join(", ") : "dist/svc-agent missing";
  return { cpuModel: model, cores: cpus().length, kernel: release(), bun: Bun.version, agentVersion: version, memTotalMb: mem ? Math.round(Number(mem[1]) / 1024) : 0 };
}

function loadAverage(): string {
  return loadavg()
    .map((l) => l.toFixed(2))
    .join(" / ");
}

interface Outcome {
  plan: Plan;
  command: string;
  exitCode: number | null;
  timedOut: boolean;
  /** Printed its result(s) and then did not exit: stopped by the runner. */
  stoppedAfterResult: boolean;
  seconds: number;
  output: string;
  results: BenchResultWithCurves[];
  errors: string[];
  adapted: boolean;
  skipped?: string;
}

/** Runs one benchmark in its own process group (setsid) so a timeout stops it and every child it started. */
async function runOne(plan: Plan, timeoutS: number): Promise<Outcome> {
  const args = [...(QUICK ? plan.quickArgs : plan.args), ...(plan.selfLimitFlag ? [plan.selfLimitFlag, String(Math.max(1, timeoutS - SELF_LIMIT_MARGIN_S))] : [])];
  const file = join(BENCH_DIR, `${plan.name}.ts`);
  const command = ["bun", relative(ROOT, file), ...args].join(" ");
  console.log(`\n=== ${plan.name}: ${command} (limit ${timeoutS} s)`);
  const started = performance.now();
  const proc = Bun.spawn(["setsid", process.execPath, file, ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe", env: process.env });
  let output = "";
  let timedOut = false;
  let stoppedAfterResult = false;
  let lastOutputAt = performance.now();
  const pump = async (stream: ReadableStream<Uint8Array>, sink: NodeJS.WriteStream) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) {
      const text = decoder.decode(chunk, { stream: true });
      output += text;
      lastOutputAt = performance.now();
      sink.write(text);
    }
  };
  const stopGroup = () => {
    const group = -proc.pid;
    try {
      process.kill(group, "SIGTERM");
    } catch {}
    setTimeout(() => {
      try {
        process.kill(group, "SIGKILL");
      } catch {}
    }, KILL_GRACE_MS).unref();
  };
  const timer = setTimeout(() => {
    timedOut = true;
    stopGroup();
  }, timeoutS * 1000);
  const watchdog = setInterval(() => {
    if (stoppedAfterResult || timedOut || !output.includes(`\n${RESULT_PREFIX}`)) return;
    if (performance.now() - lastOutputAt > QUIET_AFTER_RESULT_S * 1000) {
      stoppedAfterResult = true;
      console.log(`\n(bench: ${plan.name} printed its result and has been silent for ${QUIET_AFTER_RESULT_S} s without exiting: stopping it)`);
      stopGroup();
    }
  }, 1000);
  await Promise.all([pump(proc.stdout, process.stdout), pump(proc.stderr, process.stderr), proc.exited]);
  clearTimeout(timer);
  clearInterval(watchdog);
  const seconds = (performance.now() - started) / 1000;
  const { results, errors, adapted } = collect(plan.name, output);
  return { plan, command, exitCode: proc.exitCode, timedOut, stoppedAfterResult, seconds, output, results, errors, adapted };
}

function fmt(n: number | undefined): string {
  if (n === undefined || !Number.isFinite(n)) return "-";
  if (Math.abs(n) >= 1000) return Math.round(n).toLocaleString("en-US");
  return Number(n.toPrecision(3)).toString();
}

const cell = (s: string) => s.replaceAll("|", "\\|").replaceAll("\n", " ");

function ratio(r: BenchRow): string {
  return r.reference ? (r.agent / r.reference).toFixed(2) : "-";
}

function met(r: BenchRow): string {
  return r.met === undefined ? "-" : r.met ? "yes" : "**NO**";
}

function rowsTable(rows: BenchRow[]): string[] {
  const out = ["| Measure | Unit | Agent | Reference (same run) | Ratio agent/ref | Target | Met |", "|---|---|---:|---|---:|---|---|"];
  for (const r of rows) {
    const ref = r.reference === undefined ? "-" : `${fmt(r.reference)}${r.referenceName ? ` (${r.referenceName})` : ""}`;
    out.push(`| ${cell(r.name)} | ${cell(r.unit)} | ${fmt(r.agent)} | ${cell(ref)} | ${ratio(r)} | ${cell(r.target ?? "-")} | ${met(r)} |`);
  }
  return out;
}

function curveTable(c: Curve): string[] {
  const out = [`| ${cell(c.xLabel)} | ${c.series.map((s) => `${cell(s.name)} (${cell(c.unit)})`).join(" | ")} |`, `|---:|${c.series.map(() => "---:").join("|")}|`];
  c.x.forEach((x, i) => out.push(`| ${fmt(x)} | ${c.series.map((s) => fmt(s.y[i])).join(" | ")} |`));
  return out;
}

/** Missed-target explanations found by profiling, kept by hand in bench/findings.md (sections per benchmark). */
function findings(): string | undefined {
  const path = join(BENCH_DIR, "findings.md");
  return existsSync(path) ? readFileSync(path, "utf8").trim() : undefined;
}

function writeReport(outcomes: Outcome[], m: Machine, loadStart: string, loadEnd: string, startedAt: Date, totalS: number): void {
  const busy = loadavg()[0]! > m.cores * BUSY_LOAD_PER_CORE || Number(loadStart.split(" / ")[0]) > m.cores * BUSY_LOAD_PER_CORE;
  const lines: string[] = [];
  const cmd = ["bun run bench", ...process.argv.slice(2)].join(" ");
  lines.push(
    "# Benchmarks",
    "",
    `Written by \`${cmd}\` (bench/run.ts) on ${startedAt.toISOString()}; every figure below is one the benchmark printed in this run (its \`BENCH-RESULT\` line, or its own table where noted), next to a reference measured in the same run. Regenerate with \`bun run bench\` after \`bash .ci/setup\` (as root: eBPF).`,
    "",
  );
  if (QUICK) lines.push("> **Quick run** (`--quick`): short durations to check the runner, not figures to size a deployment by.", "");
  lines.push(
    "## Machine and run",
    "",
    `- CPU: ${m.cpuModel}, ${m.cores} cores; memory ${m.memTotalMb.toLocaleString("en-US")} MB`,
    `- Kernel: ${m.kernel}; Bun ${m.bun}; agent: ${m.agentVersion}`,
    `- Date: ${startedAt.toISOString()}; whole run ${totalS.toFixed(0)} s (budget ${BUDGET_S} s)`,
    `- Load average (1/5/15 min) at start: ${loadStart}; at end: ${loadEnd}`,
  );
  if (busy)
    lines.push(
      `- **The machine was busy** (load above ${BUSY_LOAD_PER_CORE} per core): other processes shared the ${m.cores} cores, so throughput and latency figures are lower than on a quiet machine; ratios against same-run references and memory figures are less affected.`,
    );
  lines.push("");

  const missed: Array<{ bench: string; row: BenchRow }> = [];
  lines.push("## Summary", "", "| Benchmark | Measure | Unit | Agent | Reference | Ratio | Target | Met |", "|---|---|---|---:|---:|---:|---|---|");
  for (const o of outcomes) {
    if (!o.results.length) {
      lines.push(`| ${o.plan.name} | ${o.skipped ? `skipped: ${cell(o.skipped)}` : o.timedOut ? `timed out after ${o.plan.timeoutS} s` : `no result (exit ${o.exitCode})`} | | | | | | |`);
      continue;
    }
    for (const res of o.results)
      for (const r of res.rows) {
        if (r.met === false) missed.push({ bench: o.plan.name, row: r });
        lines.push(`| ${o.plan.name} | ${cell(r.name)} | ${cell(r.unit)} | ${fmt(r.agent)} | ${fmt(r.reference)} | ${ratio(r)} | ${cell(r.target ?? "-")} | ${met(r)} |`);
      }
  }
  lines.push("");

  lines.push("## Targets missed in this run", "");
  if (!missed.length) lines.push("None.");
  for (const { bench, row } of missed) lines.push(`- **${bench}**: ${row.name}: ${fmt(row.agent)} ${row.unit}, target ${row.target}${row.reference !== undefined ? ` (reference ${fmt(row.reference)})` : ""}.`);
  const f = findings();
  if (missed.length && f) lines.push("", "Where the costs go (bench/findings.md; each section gives its figures and the commands that give them):", "", f.replace(/^# .*\n/, ""));
  lines.push("");

  for (const o of outcomes) {
    lines.push(`## ${o.plan.name}`, "");
    lines.push(`Command: \`${o.command}\` — ${o.skipped ? `skipped: ${o.skipped}` : `${o.seconds.toFixed(1)} s, ${o.timedOut ? `**stopped at its ${o.plan.timeoutS} s limit**` : o.stoppedAfterResult ? `printed its result, then did not exit within ${QUIET_AFTER_RESULT_S} s: stopped by the runner` : `exit ${o.exitCode}`}`}${o.plan.root ? "; needs root" : ""}`, "");
    for (const e of o.errors) lines.push(`- ${e}`);
    for (const res of o.results) {
      lines.push(`**${cell(res.bench)}**${o.adapted ? " (figures parsed from the benchmark's own table)" : ""}`, "", ...rowsTable(res.rows), "");
      for (const n of res.notes ?? []) lines.push(`- ${n}`);
      if (res.notes?.length) lines.push("");
      for (const c of res.curves ?? []) {
        const png = join(CHART_DIR, `${c.id}.png`);
        lines.push(`*${cell(c.title)}*`, "", ...curveTable(c), "", `![${c.title}](${relative(resolve(OUT, ".."), png)})`, "");
      }
    }
    if (!o.results.length && !o.skipped) lines.push("No BENCH-RESULT line: see the raw output below.", "");
  }

  lines.push("## Raw output", "");
  for (const o of outcomes) {
    if (o.skipped) continue;
    lines.push(`<details><summary>${o.plan.name}: <code>${o.command}</code></summary>`, "", "```", o.output.trimEnd().replaceAll("```", "'''"), "```", "", "</details>", "");
  }
  writeFileSync(OUT, lines.join("\n"));
}

async function main(): Promise<void> {
  const plans = discover();
  if (process.argv.includes("--list")) {
    for (const p of plans) console.log(`${p.name}: bun bench/${p.name}.ts ${(QUICK ? p.quickArgs : p.args).join(" ")} (limit ${p.timeoutS} s)`);
    return;
  }
  if (!existsSync(BINARY)) {
    console.log("dist/svc-agent missing: bun run build");
    const b = Bun.spawnSync([process.execPath, "run", "build"], { cwd: ROOT, stdout: "inherit", stderr: "inherit" });
    if (b.exitCode !== 0) throw new Error("build failed");
  }
  const startedAt = new Date();
  const loadStart = loadAverage();
  const m = machine();
  console.log(`bench: ${plans.length} benchmarks, budget ${BUDGET_S} s; ${m.cpuModel}, ${m.cores} cores, kernel ${m.kernel}; load ${loadStart}`);
  const t0 = performance.now();
  const outcomes: Outcome[] = [];
  const isRoot = process.getuid?.() === 0;
  for (const plan of plans) {
    const left = BUDGET_S - RESERVE_S - (performance.now() - t0) / 1000;
    const skip = plan.root && !isRoot ? "needs root" : left < 5 ? "run budget spent" : undefined;
    if (skip) {
      outcomes.push({ plan, command: `bun bench/${plan.name}.ts ${(QUICK ? plan.quickArgs : plan.args).join(" ")}`.trim(), exitCode: null, timedOut: false, stoppedAfterResult: false, seconds: 0, output: "", results: [], errors: [], adapted: false, skipped: skip });
      continue;
    }
    outcomes.push(await runOne(plan, Math.min(plan.timeoutS, Math.floor(left))));
  }
  mkdirSync(CHART_DIR, { recursive: true });
  for (const o of outcomes) for (const r of o.results) for (const c of r.curves ?? []) writeFileSync(join(CHART_DIR, `${c.id}.png`), renderChart(c));
  const totalS = (performance.now() - t0) / 1000;
  writeReport(outcomes, m, loadStart, loadAverage(), startedAt, totalS);
  const failed = outcomes.filter((o) => !o.skipped && !o.results.length).map((o) => o.plan.name);
  console.log(`\nbench: wrote ${relative(ROOT, OUT)} in ${totalS.toFixed(0)} s${failed.length ? `; no result from: ${failed.join(", ")}` : ""}`);
}

await main();
