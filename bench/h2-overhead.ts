/**
 * HTTP/2 tracing overhead: requests/s of a local h2c server (Node's http2, in a child process) under h2load
 * (one thread, keep-alive connections multiplexing streams, loopback) with the compiled agent (dist/svc-agent)
 * tracing it and without, side by side in one run. Traced means ebpf/network with HTTP capture on: the kernel
 * forwards every read and write of the HTTP/2 connections, user space parses frames and HPACK, and exchanges up to
 * max_spans_per_second become spans exported to a local receiver. Target: at most 5% fewer requests/s traced.
 *
 * One agent serves both states, switched by rewriting its configuration and POST /admin/reload: untraced is the
 * network programs detached and the agent stopped (SIGSTOP), as when it does not run; traced is measured
 * SETTLE_MS after the reload that attached them. Requests/s swings with the host (a shared 2-core VM), so what
 * decides is many short pairs measured back to back, in reverse order every other round; the headline is the median
 * of the per-round ratios traced/untraced with its 90% bootstrap interval. The traced runs also report how many
 * HTTP/2 connection directions lost their HPACK state (bytes not forwarded: a full ring buffer under load) and how
 * many spans were collected, and the kernel's HTTP/2 counters: connections it stopped forwarding (over
 * http2_records_per_second, the ring three quarters full, or a record lost) and calls it cut. Traced runs with
 * stopped connections measured an agent that had stopped decoding them. One extra traced run before the rounds, with
 * kernel.bpf_stats_enabled on (it adds clock reads to every program run, so measured runs go without it), gives the
 * BPF time per request of every program in the socket calls (network and TLS sets), and the sends' share of it.
 * The traced warm-up lasts at least --warmup seconds and then until the agent's JIT has compiled what the load made
 * hot (warmUntilJitSettles, at most --max-warmup seconds): what the rounds measure is the agent past its first
 * minutes, not its compiler.
 *
 * Usage: bun bench/h2-overhead.ts [--seconds N] [--rounds R] [--warmup S] [--max-warmup S] [--clients C] [--streams M]
 */
import { readFileSync, writeFileSync } from "node:fs";
import { report } from "./lib/report";
import { BPF_STATS_PATH, attachedPrograms, bpfRunStats, metricSum, programMapSums, reloadInto, startAgent, startReceiver, type BenchAgent } from "./lib/agent";
import { NetworkStat } from "../src/collectors/network/spec";
import { median } from "./lib/stats";
import { NETWORK_PROGRAMS, NICE, NODE_H2C_SERVER, SETTLE_MS, SOCKET_CALL_PROGRAMS, perRequestUs, ratioRows, startPortServer, warmUntilJitSettles, warmUpNote } from "./lib/overhead";
import { cpuSeconds, reniceAll } from "./lib/proc";
import { quietConfig } from "../test/helpers/quiet-config";
import { argNumber } from "./lib/args";

const SECONDS = argNumber("seconds", 1);
const ROUNDS = argNumber("rounds", 24);
const WARMUP_SECONDS = argNumber("warmup", 10);
const MAX_WARMUP_SECONDS = argNumber("max-warmup", 120);
const CLIENTS = argNumber("clients", 4);
const STREAMS = argNumber("streams", 10);
const SPANS_PER_SECOND = 250;


interface State {
  name: string;
  network: boolean;
  stopped: boolean;
}
const UNTRACED: State = { name: "untraced (network programs detached, agent stopped)", network: false, stopped: true };
const TRACED: State = { name: "ebpf/network + HTTP/2 tracing", network: true, stopped: false };

const config = (otlp: string, s: State) =>
  quietConfig({
    endpoint: otlp,
    ebpf: `    enabled: true\n    network:\n      enabled: ${s.network}\n      http: true\n      max_spans_per_second: ${SPANS_PER_SECOND}\n    syscalls:\n      enabled: false`,
    agent: "  profiling:\n    enabled: false",
  });

interface Run {
  rps: number;
  requests: number;
  serverCpu: number;
  agentCpu: number;
}

async function h2load(url: string, seconds: number, pids: { server: number; agent: number }): Promise<Run> {
  const [s0, a0] = [cpuSeconds(pids.server), cpuSeconds(pids.agent)];
  const p = Bun.spawn(["nice", "-n", String(NICE), "h2load", "-t1", `-c${CLIENTS}`, `-m${STREAMS}`, "-D", String(seconds), url], { stdout: "pipe", stderr: "pipe" });
  const out = await new Response(p.stdout).text();
  await p.exited;
  const [s1, a1] = [cpuSeconds(pids.server), cpuSeconds(pids.agent)];
  const rps = /finished in [^,]+, ([\d.]+) req\/s/.exec(out);
  const done = /requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded/.exec(out);
  if (!rps || !done) throw new Error(`h2load gave no figure:\n${out}`);
  if (done[1] !== done[2]) throw new Error(`h2load saw failed requests:\n${out}`);
  return { rps: Number(rps[1]), requests: Number(done[1]), serverCpu: s1 - s0, agentCpu: a1 - a0 };
}

let stopped = false;
async function enter(agent: BenchAgent, otlp: string, state: State): Promise<void> {
  if (stopped) process.kill(agent.pid, "SIGCONT");
  stopped = false;
  await reloadInto(agent, config(otlp, state), state.name, async () => {
    const attached = new Set((await attachedPrograms(agent)).map((p) => p.name));
    return NETWORK_PROGRAMS.every((n) => attached.has(n) === state.network) || [...attached].join(",");
  });
  await Bun.sleep(state.stopped ? 100 : SETTLE_MS);
  if (state.stopped) {
    process.kill(agent.pid, "SIGSTOP");
    stopped = true;
  }
}

const receiver = await startReceiver();
const server = await startPortServer(["node", "-e", NODE_H2C_SERVER]);
let agent: BenchAgent | undefined;
try {
  const url = `http://127.0.0.1:${server.port}/bench`;
  agent = await startAgent(config(receiver.address, TRACED));
  reniceAll(agent.pid, NICE);
  reniceAll(receiver.pid, NICE);
  const pids = { server: server.pid, agent: agent.pid };
  await enter(agent, receiver.address, TRACED);
  const warm = await warmUntilJitSettles(agent.pid, (seconds) => h2load(url, seconds, pids), { minSeconds: WARMUP_SECONDS, maxSeconds: Math.max(WARMUP_SECONDS, MAX_WARMUP_SECONDS) });
  /* BPF time per request: one traced run with bpf_stats on (every program in the socket calls, and the sends apart). */
  const programs = (await attachedPrograms(agent)).filter((p) => SOCKET_CALL_PROGRAMS.includes(p.name));
  const socketIds = new Set(programs.map((p) => p.id));
  const sendIds = new Set(programs.filter((p) => p.name === "on_send_length").map((p) => p.id));
  let bpf = { requests: 0, ns: 0, sendNs: 0, sendRuns: 0 };
  const statsWere = readFileSync(BPF_STATS_PATH, "utf8").trim();
  writeFileSync(BPF_STATS_PATH, "1");
  try {
    const [b0, s0] = [bpfRunStats(socketIds), bpfRunStats(sendIds)];
    const run = await h2load(url, SECONDS, pids);
    const [b1, s1] = [bpfRunStats(socketIds), bpfRunStats(sendIds)];
    bpf = { requests: run.requests, ns: b1.ns - b0.ns, sendNs: s1.ns - s0.ns, sendRuns: s1.runs - s0.runs };
  } finally {
    writeFileSync(BPF_STATS_PATH, statsWere);
  }

  const runs = new Map<State, Run[]>([[UNTRACED, []], [TRACED, []]]);
  const ratios: number[] = [];
  let spans = 0;
  let lost = 0;
  let rateLimited = 0;
  /* The kernel's HTTP/2 counters (STAT_H2_*): connections stopped by the record limit or ring pressure, by a lost record, calls cut. */
  const h2Stats = () => programMapSums(agent!, "on_send_length", "stats", [NetworkStat.H2_STOPPED_LIMIT, NetworkStat.H2_STOPPED_RING, NetworkStat.H2_STOPPED_LOST, NetworkStat.H2_CUT]);
  const kernelH2 = [0, 0, 0, 0];
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? [UNTRACED, TRACED] : [TRACED, UNTRACED];
    const measured = new Map<State, Run>();
    for (const s of order) {
      await enter(agent, receiver.address, s);
      const counted = s === TRACED;
      const before = counted ? [await metricSum(agent, "svc_spans_collected_total"), await metricSum(agent, 'svc_spans_dropped_total{reason="http2_state_lost"}'), await metricSum(agent, 'svc_spans_dropped_total{reason="rate_limit"}')] : [];
      const h2Before = counted ? await h2Stats() : [];
      measured.set(s, await h2load(url, SECONDS, pids));
      if (counted) {
        /* The stats poll (1 s) counts what user space lost: read after it ran. */
        await Bun.sleep(1100);
        spans += (await metricSum(agent, "svc_spans_collected_total")) - before[0]!;
        lost += (await metricSum(agent, 'svc_spans_dropped_total{reason="http2_state_lost"}')) - before[1]!;
        rateLimited += (await metricSum(agent, 'svc_spans_dropped_total{reason="rate_limit"}')) - before[2]!;
        (await h2Stats()).forEach((n, i) => (kernelH2[i]! += n - h2Before[i]!));
      }
    }
    for (const [s, r] of measured) runs.get(s)!.push(r);
    ratios.push(measured.get(TRACED)!.rps / measured.get(UNTRACED)!.rps);
    console.log(`round ${round + 1}: untraced ${Math.round(measured.get(UNTRACED)!.rps)}, traced ${Math.round(measured.get(TRACED)!.rps)} req/s`);
  }
  if (stopped) process.kill(agent.pid, "SIGCONT");
  stopped = false;

  const untracedRps = median(runs.get(UNTRACED)!.map((r) => r.rps));
  const tracedRuns = runs.get(TRACED)!;
  report({
    bench: `HTTP/2 tracing overhead (h2load -t1 -c${CLIENTS} -m${STREAMS} against a Node http2 h2c server, ${SECONDS}s runs, ${ROUNDS} rounds of untraced + traced, after a ${warm.seconds}s warm-up; medians)`,
    rows: [
      { name: "h2c requests/s, untraced", agent: untracedRps, unit: "req/s" },
      { name: "h2c requests/s, traced", agent: median(tracedRuns.map((r) => r.rps)), reference: untracedRps, referenceName: "untraced", unit: "req/s" },
      ...ratioRows(ratios, `requests/s traced / untraced, median of the ${ratios.length} rounds' ratios`),
      { name: "server CPU per request, untraced", agent: perRequestUs(runs.get(UNTRACED)!, (r) => r.serverCpu), unit: "us" },
      { name: "server CPU per request, traced", agent: perRequestUs(tracedRuns, (r) => r.serverCpu), unit: "us" },
      { name: "agent CPU per request, traced", agent: perRequestUs(tracedRuns, (r) => r.agentCpu), unit: "us" },
      { name: "BPF programs in the socket calls (network and TLS sets) per request (bpf_stats, one extra run)", agent: bpf.requests > 0 ? bpf.ns / bpf.requests : 0, unit: "ns" },
      { name: "of which on_send_length (the sends, whose HTTP/2 frames are copied to the ring)", agent: bpf.requests > 0 ? bpf.sendNs / bpf.requests : 0, unit: "ns" },
    ],
    notes: [
      `ratios per round: ${ratios.map((x) => x.toFixed(3)).join(", ")}`,
      warmUpNote(warm),
      `bpf_stats run: ${bpf.requests} requests, on_send_length ${bpf.sendRuns > 0 ? Math.round(bpf.sendNs / bpf.sendRuns) : 0} ns a run, ${bpf.requests > 0 ? (bpf.sendRuns / bpf.requests).toFixed(3) : 0} runs a request`,
      `traced runs: ${tracedRuns.reduce((n, r) => n + r.requests, 0)} requests, ${spans} spans collected (${SPANS_PER_SECOND}/s cap), ${rateLimited} over the cap, ${lost} HTTP/2 connection directions whose HPACK state was lost (http2_state_lost)`,
      `kernel, traced runs (all HTTP/2 traffic on the host): ${kernelH2[0]} connections stopped by http2_records_per_second, ${kernelH2[1]} by ring pressure, ${kernelH2[2]} by a record lost in a full ring, ${kernelH2[3]} calls cut`,
      `load average at the end: ${readFileSync("/proc/loadavg", "utf8").trim()}`,
    ],
  });
} finally {
  if (stopped && agent) process.kill(agent.pid, "SIGCONT");
  await agent?.stop();
  await server.stop();
  await receiver.stop();
}
