/**
 * TLS tracing overhead: HTTPS requests/s of Python's http.server wrapped in ssl (/usr/bin/python3, libssl.so.3,
 * test/fixtures/https-server.py, one thread per connection) under wrk (one thread, keep-alive, loopback; wrk links
 * libssl too, so both sides are traced) with the compiled agent's TLS uprobes on and off, side by side in one run.
 * Both states run ebpf/network with HTTP capture (what is compared is agent.ebpf.network.tls alone): off, the
 * `tls` set is not loaded; on, SSL_read/SSL_write(_ex) of libssl.so.3 are probed and every call's plaintext goes to
 * the agent, which parses it and makes spans (up to max_spans_per_second, exported to a local receiver).
 * Target (issue 21): at most 5% fewer requests/s with the TLS uprobes on.
 *
 * One agent serves both states, switched by rewriting its configuration and POST /admin/reload, after a short
 * traced warm-up. Each round measures both states back to back, in reverse order every other round; the headline
 * is the median over rounds of on/off within a round (a 2-core shared VM: single runs swing widely, pairs less).
 * CPU per request (server + wrk, where the uprobes run; and the agent's) comes from /proc. Everything runs at
 * nice -20 so that other work on the machine disturbs it less.
 *
 * Usage: bun bench/tls-overhead.ts [--seconds N] [--rounds R] [--warmup S] [--connections C] [--max-seconds S]
 */
import { rmSync } from "node:fs";
import { resolve } from "node:path";
import { makeSelfSignedCert } from "../test/helpers/self-signed-cert";
import { metricSum, reloadInto, startAgent, startReceiver, type BenchAgent } from "./lib/agent";
import { cpuSeconds, reniceAll } from "./lib/proc";
import { runWrk } from "./lib/wrk";
import { report } from "./lib/report";
import { mean, median } from "./lib/stats";
import { argNumber } from "./lib/args";
import { NICE, SETTLE_MS, perRequestUs, ratioRows, startPortServer } from "./lib/overhead";

const SECONDS = argNumber("seconds", 2);
const ROUNDS = argNumber("rounds", 8);
const WARMUP_SECONDS = argNumber("warmup", 6);
const CONNECTIONS = argNumber("connections", 8);
const MAX_SECONDS = argNumber("max-seconds", 150);
const SPANS_PER_SECOND = 250;
const SERVER = resolve(import.meta.dir, "../test/fixtures/https-server.py");

interface State {
  name: string;
  tls: boolean;
}
const OFF: State = { name: "TLS uprobes off", tls: false };
const ON: State = { name: "TLS uprobes on", tls: true };

const config = (otlp: string, s: State) => `
self_telemetry:
  listen: 127.0.0.1:0
otlp:
  endpoint: ${otlp}
agent:
  ebpf:
    enabled: true
    network:
      enabled: true
      http: true
      tls: ${s.tls}
      max_spans_per_second: ${SPANS_PER_SECOND}
    syscalls:
      enabled: false
  profiling:
    enabled: false
  discovery:
    detect_kubernetes: false
    docker:
      enabled: false
    cloud:
      enabled: false
`;

interface Run {
  rps: number;
  requests: number;
  serverCpu: number;
  wrkCpu: number;
  agentCpu: number;
}

async function wrk(url: string, seconds: number, pids: { server: number; agent: number }): Promise<Run> {
  const [s0, a0] = [cpuSeconds(pids.server), cpuSeconds(pids.agent)];
  const run = await runWrk(["nice", "-n", String(NICE), "wrk", "-t1", `-c${CONNECTIONS}`, `-d${seconds}s`, url]);
  const [s1, a1] = [cpuSeconds(pids.server), cpuSeconds(pids.agent)];
  return { rps: run.rps, requests: run.requests, serverCpu: s1 - s0, wrkCpu: run.wrkCpuSeconds, agentCpu: a1 - a0 };
}

/** Rewrites the configuration, reloads, and waits until the server's libssl is probed (on) or nothing is (off). */
async function enter(agent: BenchAgent, otlp: string, s: State, serverPid: number): Promise<void> {
  await reloadInto(agent, config(otlp, s), s.name, async () => {
    const view = (await (await fetch(`${agent.url}/status/ebpf`)).json()) as { tls?: Array<{ state: string; pids: number[] }>; programs: Array<{ name: string; attached: boolean }> };
    const probed = (view.tls ?? []).some((t) => t.state === "attached" && t.pids.includes(serverPid));
    const anyUprobe = view.programs.some((p) => p.name.startsWith("ssl_") && p.attached);
    return (s.tls ? probed : !anyUprobe && view.tls === undefined) || JSON.stringify(view.tls);
  });
  await Bun.sleep(SETTLE_MS);
}

const started = performance.now();
const cert = makeSelfSignedCert();
const receiver = await startReceiver();
reniceAll(receiver.pid, NICE);
const server = await startPortServer(["/usr/bin/python3", SERVER, cert.certPath, `${cert.dir}/key.pem`]);
let agent: BenchAgent | undefined;
try {
  const url = `https://127.0.0.1:${server.port}/bench?q=1`;
  agent = await startAgent(config(receiver.address, ON));
  reniceAll(agent.pid, NICE);
  const pids = { server: server.pid, agent: agent.pid };
  await enter(agent, receiver.address, ON, server.pid);
  await wrk(url, WARMUP_SECONDS, pids);

  const runs = new Map<State, Run[]>([[OFF, []], [ON, []]]);
  const ratios: number[] = [];
  let spans = 0;
  let events = 0;
  let longestRoundMs = 0;
  for (let round = 0; round < ROUNDS && performance.now() - started + longestRoundMs < MAX_SECONDS * 1000; round++) {
    const roundStart = performance.now();
    const order = round % 2 === 0 ? [OFF, ON] : [ON, OFF];
    const measured = new Map<State, Run>();
    for (const s of order) {
      await enter(agent, receiver.address, s, server.pid);
      const before = s.tls ? [await metricSum(agent, "svc_spans_collected_total"), await metricSum(agent, 'svc_ebpf_ringbuf_events_total{ringbuf="tls/tls_events"}')] : [0, 0];
      measured.set(s, await wrk(url, SECONDS, pids));
      if (s.tls) {
        spans += (await metricSum(agent, "svc_spans_collected_total")) - before[0]!;
        events += (await metricSum(agent, 'svc_ebpf_ringbuf_events_total{ringbuf="tls/tls_events"}')) - before[1]!;
      }
    }
    longestRoundMs = Math.max(longestRoundMs, performance.now() - roundStart);
    for (const [s, r] of measured) runs.get(s)!.push(r);
    ratios.push(measured.get(ON)!.rps / measured.get(OFF)!.rps);
    console.log(`round ${round + 1}: off ${Math.round(measured.get(OFF)!.rps)} req/s, on ${Math.round(measured.get(ON)!.rps)} req/s`);
  }
  const off = runs.get(OFF)!;
  const on = runs.get(ON)!;
  const onRequests = on.reduce((n, r) => n + r.requests, 0);
  report({
    bench: `TLS tracing overhead (python3 http.server in ssl, wrk -t1 -c${CONNECTIONS} over HTTPS, ${SECONDS}s runs, ${ratios.length} rounds of off + on, after a ${WARMUP_SECONDS}s warm-up; medians)`,
    rows: [
      { name: "HTTPS requests/s, TLS uprobes off", agent: median(off.map((r) => r.rps)), unit: "req/s" },
      { name: "HTTPS requests/s, TLS uprobes on", agent: median(on.map((r) => r.rps)), reference: median(off.map((r) => r.rps)), referenceName: "off", unit: "req/s" },
      ...ratioRows(ratios, `requests/s on / off, median of the ${ratios.length} rounds' ratios`),
      { name: "server + wrk CPU per request, TLS uprobes on", agent: perRequestUs(on, (r) => r.serverCpu + r.wrkCpu), reference: perRequestUs(off, (r) => r.serverCpu + r.wrkCpu), referenceName: "off", unit: "us" },
      { name: "agent CPU per request, TLS uprobes on", agent: perRequestUs(on, (r) => r.agentCpu), reference: perRequestUs(off, (r) => r.agentCpu), referenceName: "off", unit: "us" },
      { name: "TLS records per request (both sides), TLS uprobes on", agent: onRequests > 0 ? events / onRequests : 0, unit: "records" },
    ],
    notes: [
      `requests/s per round: off ${off.map((r) => Math.round(r.rps)).join(", ")}; on ${on.map((r) => Math.round(r.rps)).join(", ")}`,
      `ratios per round: ${ratios.map((x) => x.toFixed(3)).join(", ")}`,
      // The second run of a pair tends to be slower on a loaded 2-core VM: the order is alternated, and split here.
      `mean ratio by order: off measured first ${mean(ratios.filter((_, i) => i % 2 === 0)).toFixed(3)}, on measured first ${ratios.length > 1 ? mean(ratios.filter((_, i) => i % 2 === 1)).toFixed(3) : "-"}`,
      `spans collected in the runs with TLS on: ${spans} (server and wrk client spans, ${SPANS_PER_SECOND}/s cap)`,
    ],
  });
} finally {
  await agent?.stop();
  await server.stop();
  await receiver.stop();
  rmSync(cert.dir, { recursive: true, force: true });
}
