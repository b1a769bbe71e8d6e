/**
 * TLS tracing overhead: HTTPS requests/s of Python's http.server wrapped in ssl (/usr/bin/python3, libssl.so.3,
 * test/fixtures/https-server.py, one thread per connection) under wrk (one thread, keep-alive, loopback; wrk links
 * libssl too, so both sides are traced) with the TLS uprobes on and off, side by side in one run.
 * Target (issue 21): at most 5% fewer requests/s with the TLS uprobes on.
 *
 * One agent (dist/svc-agent: ebpf/network with HTTP capture and its `tls` set, max_spans_per_second 250, spans
 * exported to a local receiver) runs throughout, and two identical servers run beside it:
 * - on: a server on the system's libssl, loaded by wrk on the same libssl. The agent probes that file:
 *   SSL_read/SSL_write(_ex) of both sides trap, and every call's plaintext goes to the agent, which parses it, counts
 *   it and makes spans;
 * - off: a server on a private copy of that libssl (LD_LIBRARY_PATH; the same bytes, another inode), loaded by wrk
 *   on the copy. With max_tls_libraries 1 the agent lists the copy as `limit` and never probes it.
 * - least (unless --aa): a third server on a second private copy, with wrk on it, and on that copy the probes of
 *   bench/lib/tls-least.ts at the agent's probe sites: what probing SSL calls needs at the least (the call's buffer
 *   kept at entry, the byte count and 12 bytes of plaintext read at return), nothing else. Its ratio to off is the
 *   most an uprobe-based design reaches here: the ceiling under the target, measured in the same rounds.
 * So the state changes between two runs without a reload (the runs of a pair a fraction of a second apart: on a
 * shared 2-core VM whose speed swings in spells of seconds, pairs far apart compare different spells). Each round
 * measures both, in reverse order every other round; the headline is the median over rounds of on/off within a
 * round. What "off" still has of the agent: its TLS set's socket part (in the network set's socket programs), which
 * runs in every TCP call of every process and stops at a task storage lookup (and for reads a map lookup) for
 * processes not mapping a probed file.
 *
 * CPU per request (server and wrk, where the uprobes run; and the agent's) comes from /proc; on a machine this
 * workload saturates, total CPU per request off / on is what the requests/s ratio tends to, and it moves less with
 * other load (printed beside the headline). The time in the TLS probes and the socket call programs (the network
 * set's, which run the TLS set's socket part) per request comes from the kernel's
 * bpf_stats in one extra run before the rounds (bpf_stats adds clock reads to every program run, so measured runs
 * go without it). Everything runs at nice -20 so that other work on the machine disturbs it less.
 *
 * Other processes' uprobes on a libssl (another agent running on the machine) trap on the system libssl (on) but
 * not on the private copy (off): each run checks for them (bpftool perf list) before and after, and when at least
 * MIN_CLEAN_ROUNDS rounds were free of them the headline is computed over those rounds alone (the notes say so).
 *
 * Each round first waits up to --wait-clean seconds for them to go.
 *
 * `--aa`: the agent runs without its `tls` set, so neither server is probed: the two servers alone, which should
 * give a ratio of 1 within the noise (the check that the copy and the second server cost nothing by themselves).
 *
 * The warm-up runs off for half of --warmup, then on for the other half and then until the agent's JIT has compiled
 * what the load made hot (warmUntilJitSettles; at most --max-warmup seconds, and half of --max-seconds).
 *
 * Usage: bun bench/tls-overhead.ts [--seconds N] [--rounds R] [--warmup S] [--max-warmup S] [--connections C] [--max-seconds S] [--wait-clean S] [--aa]
 */
import { copyFileSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { makeSelfSignedCert } from "../test/helpers/self-signed-cert";
import { quietConfig } from "../test/helpers/quiet-config";
import { BPF_STATS_PATH, attachedPrograms, bpfRunStats, metricSum, startAgent, startReceiver, type BenchAgent } from "./lib/agent";
import { cpuSeconds, reniceAll } from "./lib/proc";
import { runWrk } from "./lib/wrk";
import { report } from "./lib/report";
import { attachTlsLeast, type TlsLeast } from "./lib/tls-least";
import { mean, median } from "./lib/stats";
import { argNumber } from "./lib/args";
import { NICE, SOCKET_CALL_PROGRAMS, perRequestUs, ratioRows, startPortServer, warmUntilJitSettles, warmUpNote, type PortServer } from "./lib/overhead";

const SECONDS = argNumber("seconds", 2);
const ROUNDS = argNumber("rounds", 40);
const WARMUP_SECONDS = argNumber("warmup", 6);
const MAX_WARMUP_SECONDS = argNumber("max-warmup", 120);
/** The warm-up's off half, and the least of its on part. */
const HALF_WARMUP_SECONDS = Math.max(1, Math.round(WARMUP_SECONDS / 2));
const CONNECTIONS = argNumber("connections", 8);
const MAX_SECONDS = argNumber("max-seconds", 200);
const BPF_STATS_SECONDS = 2;
/** Rounds free of other processes' libssl uprobes needed to judge on them alone. */
const MIN_CLEAN_ROUNDS = 3;
/** Before each round, how long to wait for other processes' libssl uprobes to go (0 on a quiet machine). */
const WAIT_CLEAN_SECONDS = argNumber("wait-clean", 10);
const SPANS_PER_SECOND = 250;
/** Between two runs: wrk's connections closed on both sides, and the agent's records of the last run read. */
const GAP_MS = 300;
const SERVER = resolve(import.meta.dir, "../test/fixtures/https-server.py");
const LIBSSL = "/usr/lib/x86_64-linux-gnu/libssl.so.3";
/** Both servers unprobed (the agent's `tls` set off): the design's own bias. */
const AA = process.argv.includes("--aa");

interface State {
  name: string;
  /** LD_LIBRARY_PATH of its server and wrk: the private copy's folder (off), or none (on: the system libssl). */
  libraryPath: string | undefined;
}

const config = (otlp: string) =>
  quietConfig({
    endpoint: otlp,
    ebpf: `    enabled: true
    network:
      enabled: true
      http: true
      tls: ${!AA}
      max_tls_libraries: 1
      max_spans_per_second: ${SPANS_PER_SECOND}
    syscalls:
      enabled: false`,
    agent: "  profiling:\n    enabled: false",
  });

interface Run {
  rps: number;
  requests: number;
  serverCpu: number;
  wrkCpu: number;
  agentCpu: number;
  /** Uprobes on a libssl held by other processes than the agent, before or after the run (the most seen). */
  foreignProbes: number;
  /** Time in the TLS probes and the socket call programs, and their runs (only with bpf_stats on). */
  bpfNs: number;
  bpfRuns: number;
}

/** Uprobes and uretprobes on a libssl file attached by processes other than `agentPid` and this one (bpftool perf list). */
function foreignLibsslProbes(agentPid: number): number {
  const r = Bun.spawnSync(["bpftool", "-j", "perf", "list"], { stdout: "pipe", stderr: "ignore" });
  if (r.exitCode !== 0) return 0;
  const links = JSON.parse(r.stdout.toString() || "[]") as Array<{ pid: number; fd_type: string; filename?: string }>;
  // This process's own: the least probes on the second copy.
  return links.filter((l) => l.pid !== agentPid && l.pid !== process.pid && (l.fd_type === "uprobe" || l.fd_type === "uretprobe") && /\/libssl\.so/.test(l.filename ?? "")).length;
}

/** The command prefix that runs a program of state `s` at NICE on its libssl. */
const prefix = (s: State) => ["nice", "-n", String(NICE), ...(s.libraryPath ? ["env", `LD_LIBRARY_PATH=${s.libraryPath}`] : [])];

async function wrk(s: State, server: PortServer, agentPid: number, seconds = SECONDS, bpfIds = new Set<number>()): Promise<Run> {
  const url = `https://127.0.0.1:${server.port}/bench?q=1`;
  const f0 = foreignLibsslProbes(agentPid);
  writeFileSync(BPF_STATS_PATH, bpfIds.size > 0 ? "1" : "0");
  const b0 = bpfRunStats(bpfIds);
  const [s0, a0] = [cpuSeconds(server.pid), cpuSeconds(agentPid)];
  const run = await runWrk([...prefix(s), "wrk", "-t1", `-c${CONNECTIONS}`, `-d${seconds}s`, url]);
  const [s1, a1] = [cpuSeconds(server.pid), cpuSeconds(agentPid)];
  const b1 = bpfRunStats(bpfIds);
  writeFileSync(BPF_STATS_PATH, "0");
  const foreignProbes = Math.max(f0, foreignLibsslProbes(agentPid));
  await Bun.sleep(GAP_MS);
  return { rps: run.rps, requests: run.requests, serverCpu: s1 - s0, wrkCpu: run.wrkCpuSeconds, agentCpu: a1 - a0, foreignProbes, bpfNs: b1.ns - b0.ns, bpfRuns: b1.runs - b0.runs };
}

type TlsView = Array<{ path: string; state: string; pids: number[] }>;
const tlsView = async (agent: BenchAgent) => ((await (await fetch(`${agent.url}/status/ebpf`)).json()) as { tls?: TlsView }).tls ?? [];

/** Waits until the agent lists `pid` under a target matching `want`; throws with the view after 15 s. */
async function expectTarget(agent: BenchAgent, pid: number, what: string, want: (t: TlsView[number]) => boolean): Promise<void> {
  const end = Date.now() + 15_000;
  for (;;) {
    const view = await tlsView(agent);
    if (view.some((t) => t.pids.includes(pid) && want(t))) return;
    if (Date.now() > end) throw new Error(`${what}: /status/ebpf tls is ${JSON.stringify(view)}`);
    await Bun.sleep(100);
  }
}

const started = performance.now();
const cert = makeSelfSignedCert();
const copyDir = mkdtempSync(join(tmpdir(), "svc-bench-libssl-"));
copyFileSync(realpathSync(LIBSSL), join(copyDir, "libssl.so.3"));
const leastDir = mkdtempSync(join(tmpdir(), "svc-bench-libssl-least-"));
copyFileSync(realpathSync(LIBSSL), join(leastDir, "libssl.so.3"));
const ON: State = { name: "TLS uprobes on", libraryPath: undefined };
const OFF: State = { name: "TLS uprobes off", libraryPath: copyDir };
const LEAST: State = { name: "least probes (bench/lib/tls-least.ts) alone", libraryPath: leastDir };
const STATES = AA ? [OFF, ON] : [OFF, LEAST, ON];
const receiver = await startReceiver();
reniceAll(receiver.pid, NICE);
const serverArgs = [SERVER, cert.certPath, `${cert.dir}/key.pem`];
let agent: BenchAgent | undefined;
let least: TlsLeast | undefined;
const servers: PortServer[] = [];
try {
  // The server on the system libssl runs first, so that it is the one file max_tls_libraries 1 lets the agent probe.
  const onServer = await startPortServer(["/usr/bin/python3", ...serverArgs]);
  servers.push(onServer);
  agent = await startAgent(config(receiver.address));
  reniceAll(agent.pid, NICE);
  if (!AA) await expectTarget(agent, onServer.pid, "the system libssl attached for the 'on' server", (t) => t.state === "attached" && t.path.endsWith("libssl.so.3") && !t.path.startsWith(copyDir));
  const offServer = await startPortServer(["env", `LD_LIBRARY_PATH=${copyDir}`, "/usr/bin/python3", ...serverArgs]);
  servers.push(offServer);
  reniceAll(offServer.pid, NICE);
  if (!AA) await expectTarget(agent, offServer.pid, "the private copy listed as not probed for the 'off' server", (t) => t.state === "limit" && t.path === join(copyDir, "libssl.so.3"));
  let leastServer = offServer;
  if (!AA) {
    leastServer = await startPortServer(["env", `LD_LIBRARY_PATH=${leastDir}`, "/usr/bin/python3", ...serverArgs]);
    servers.push(leastServer);
    reniceAll(leastServer.pid, NICE);
    await expectTarget(agent, leastServer.pid, "the second private copy listed as not probed for the 'least' server", (t) => t.state === "limit" && t.path === join(leastDir, "libssl.so.3"));
    least = await attachTlsLeast(join(leastDir, "libssl.so.3"));
  }
  const serverOf = (s: State) => (s === ON ? onServer : s === LEAST ? leastServer : offServer);
  // Warm-up: both servers; the agent's TLS path until its JIT has compiled what the load made hot (within half the time allowed).
  await wrk(OFF, offServer, agent.pid, HALF_WARMUP_SECONDS);
  const warm = await warmUntilJitSettles(agent.pid, (seconds) => wrk(ON, onServer, agent!.pid, seconds), {
    minSeconds: HALF_WARMUP_SECONDS,
    maxSeconds: Math.max(1, Math.min(MAX_WARMUP_SECONDS, MAX_SECONDS / 2)),
  });
  // Time in the TLS probes (entry, return) and every program in the socket calls (the network set's, which run the
  // TLS set's socket part, and the TLS set's own close program) per request, one run with bpf_stats on.
  const tlsIds = new Set((await attachedPrograms(agent)).filter((p) => p.name.startsWith("ssl_") || SOCKET_CALL_PROGRAMS.includes(p.name)).map((p) => p.id));
  const statsRun = await wrk(ON, onServer, agent.pid, BPF_STATS_SECONDS, tlsIds);
  const leastStatsRun = least ? await wrk(LEAST, leastServer, agent.pid, BPF_STATS_SECONDS, least.ids) : undefined;

  const rounds: Array<{ off: Run; on: Run; least?: Run; offFirst: boolean }> = [];
  let spans = 0;
  let events = 0;
  let longestRoundMs = 0;
  for (let round = 0; round < ROUNDS && performance.now() - started + longestRoundMs < MAX_SECONDS * 1000; round++) {
    for (let waited = 0; waited < WAIT_CLEAN_SECONDS * 1000 && foreignLibsslProbes(agent.pid) > 0; waited += 250) await Bun.sleep(250);
    const roundStart = performance.now();
    const order = round % 2 === 0 ? STATES : [...STATES].reverse();
    const measured = new Map<State, Run>();
    for (const s of order) {
      const before = s === ON ? [await metricSum(agent, "svc_spans_collected_total"), await metricSum(agent, 'svc_ebpf_ringbuf_events_total{ringbuf="tls/tls_events"}')] : [0, 0];
      measured.set(s, await wrk(s, serverOf(s), agent.pid));
      if (s === ON) {
        spans += (await metricSum(agent, "svc_spans_collected_total")) - before[0]!;
        events += (await metricSum(agent, 'svc_ebpf_ringbuf_events_total{ringbuf="tls/tls_events"}')) - before[1]!;
      }
    }
    longestRoundMs = Math.max(longestRoundMs, performance.now() - roundStart);
    const r = { off: measured.get(OFF)!, on: measured.get(ON)!, least: measured.get(LEAST), offFirst: order[0] === OFF };
    rounds.push(r);
    const foreign = Math.max(r.off.foreignProbes, r.on.foreignProbes);
    console.log(`round ${round + 1}: off ${Math.round(r.off.rps)} req/s, on ${Math.round(r.on.rps)} req/s${r.least ? `, least ${Math.round(r.least.rps)} req/s` : ""}${foreign > 0 ? ` (${foreign} uprobes of other processes on libssl)` : ""}`);
  }
  // The copy stayed unprobed throughout (a probe on it would make "off" a second "on").
  if (!AA) await expectTarget(agent, offServer.pid, "the private copy still not probed after the rounds", (t) => t.state === "limit");
  const clean = rounds.filter((r) => r.off.foreignProbes === 0 && r.on.foreignProbes === 0);
  const judged = clean.length >= MIN_CLEAN_ROUNDS ? clean : rounds;
  const off = judged.map((r) => r.off);
  const on = judged.map((r) => r.on);
  const ratios = judged.map((r) => r.on.rps / r.off.rps);
  const leastRuns = judged.flatMap((r) => (r.least ? [r.least] : []));
  const leastRatios = judged.flatMap((r) => (r.least ? [r.least.rps / r.off.rps] : []));
  const totalCpu = (r: Run) => (r.serverCpu + r.wrkCpu + r.agentCpu) / r.requests;
  const cpuRatios = judged.map((r) => totalCpu(r.off) / totalCpu(r.on));
  const onRequests = rounds.reduce((n, r) => n + r.on.requests, 0);
  const orderMean = (offFirst: boolean) => {
    const xs = judged.filter((r) => r.offFirst === offFirst).map((r) => r.on.rps / r.off.rps);
    return xs.length > 0 ? mean(xs).toFixed(3) : "-";
  };
  report({
    bench: `TLS tracing overhead${AA ? " (--aa: the agent's tls set off, neither server probed)" : ""} (python3 http.server in ssl, wrk -t1 -c${CONNECTIONS} over HTTPS; on: server and wrk on the probed system libssl, off: on a private copy the agent does not probe; ${SECONDS}s runs, ${ratios.length} rounds of off + on${judged === clean ? " free of other processes' libssl uprobes" : ""}, after a ${warm.seconds + HALF_WARMUP_SECONDS}s warm-up; medians)`,
    rows: [
      { name: "HTTPS requests/s, TLS uprobes off", agent: median(off.map((r) => r.rps)), unit: "req/s" },
      { name: "HTTPS requests/s, TLS uprobes on", agent: median(on.map((r) => r.rps)), reference: median(off.map((r) => r.rps)), referenceName: "off", unit: "req/s" },
      ...ratioRows(ratios, `requests/s on / off, median of the ${ratios.length} rounds' ratios`),
      { name: `total CPU per request (server + wrk + agent) off / on, median of the ${cpuRatios.length} rounds' ratios`, agent: median(cpuRatios), unit: "ratio" },
      { name: "server + wrk CPU per request, TLS uprobes on", agent: perRequestUs(on, (r) => r.serverCpu + r.wrkCpu), reference: perRequestUs(off, (r) => r.serverCpu + r.wrkCpu), referenceName: "off", unit: "us" },
      { name: "server CPU per request, TLS uprobes on", agent: perRequestUs(on, (r) => r.serverCpu), reference: perRequestUs(off, (r) => r.serverCpu), referenceName: "off", unit: "us" },
      { name: "wrk CPU per request, TLS uprobes on", agent: perRequestUs(on, (r) => r.wrkCpu), reference: perRequestUs(off, (r) => r.wrkCpu), referenceName: "off", unit: "us" },
      { name: "BPF per request: TLS probes and the socket call programs (bpf_stats, one extra run)", agent: statsRun.requests > 0 ? statsRun.bpfNs / statsRun.requests / 1000 : 0, unit: "us" },
      { name: "BPF program runs per request (same run)", agent: statsRun.requests > 0 ? statsRun.bpfRuns / statsRun.requests : 0, unit: "runs" },
      ...(leastRatios.length > 0
        ? [
            { name: `HTTPS requests/s, ${LEAST.name}`, agent: median(leastRuns.map((r) => r.rps)), reference: median(off.map((r) => r.rps)), referenceName: "off", unit: "req/s" },
            ...ratioRows(leastRatios, `requests/s ${LEAST.name} / off, median of the ${leastRatios.length} rounds' ratios: the most uprobe-based tracing reaches here`, `, ${LEAST.name}`, false),
            { name: `server + wrk CPU per request, ${LEAST.name}`, agent: perRequestUs(leastRuns, (r) => r.serverCpu + r.wrkCpu), reference: perRequestUs(off, (r) => r.serverCpu + r.wrkCpu), referenceName: "off", unit: "us" },
            { name: `BPF per request, ${LEAST.name} (bpf_stats, one extra run)`, agent: leastStatsRun && leastStatsRun.requests > 0 ? leastStatsRun.bpfNs / leastStatsRun.requests / 1000 : 0, unit: "us" },
          ]
        : []),
      { name: "agent CPU per request, TLS uprobes on", agent: perRequestUs(on, (r) => r.agentCpu), reference: perRequestUs(off, (r) => r.agentCpu), referenceName: "off", unit: "us" },
      { name: "TLS records per request (both sides), TLS uprobes on", agent: onRequests > 0 ? events / onRequests : 0, unit: "records" },
    ],
    notes: [
      `requests/s per round: off ${off.map((r) => Math.round(r.rps)).join(", ")}; on ${on.map((r) => Math.round(r.rps)).join(", ")}`,
      `ratios per round: ${ratios.map((x) => x.toFixed(3)).join(", ")}`,
      ...(leastRatios.length > 0 ? [`least / off per round: ${leastRatios.map((x) => x.toFixed(3)).join(", ")}; least probes at ${least?.sites.join(", ")}`] : []),
      `on: ${warmUpNote(warm)}`,
      // The second run of a pair tends to be slower on a loaded 2-core VM: the order is alternated, and split here.
      `mean ratio by order: off measured first ${orderMean(true)}, on measured first ${orderMean(false)}`,
      `spans collected in the runs with TLS on: ${spans} (server and wrk client spans, ${SPANS_PER_SECOND}/s cap)`,
      `rounds with other processes' uprobes on libssl (they trap in the on runs, on the system libssl): ${rounds.length - clean.length} of ${rounds.length}; ${judged === clean ? "the figures above are over the others" : `fewer than ${MIN_CLEAN_ROUNDS} without them: the figures above are over all rounds and include that cost in the on runs`}`,
      `load average at the end: ${readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`,
    ],
  });
} finally {
  least?.close();
  await agent?.stop();
  for (const server of servers) await server.stop();
  await receiver.stop();
  rmSync(cert.dir, { recursive: true, force: true });
  rmSync(copyDir, { recursive: true, force: true });
  rmSync(leastDir, { recursive: true, force: true });
}
