/**
 * HTTP/2 connections opened while the agent's JIT is still cold: a fresh agent (dist/svc-agent, or SVC_BENCH_BINARY;
 * embedded ring sizes, network tracing with HTTP, `tls` as --tls) and a Node http2 h2c server; --settle seconds after
 * the server started (its executable's TLS scan, 150-300 ms of the event loop in a fresh agent, is over by then), and
 * after --warm seconds of h2load against it (0: none), four h2load processes at once (one connection each, 10
 * streams in flight, --requests each). Prints the kernel's HTTP/2 counters over those four runs (sockets stopped by
 * http2_records_per_second, by ring pressure, by a lost record; calls cut) and the http_events records forwarded: a
 * connection stopped is no longer decoded, so its streams go uncounted in the RED metrics. A tool (in bench/lib, not
 * run by bench/run.ts); needs root and h2load.
 *
 * Usage: bun bench/lib/h2-cold-start.ts [--warm S] [--settle S] [--requests N] [--ringbuf-size SIZE] [--tls true|false]
 */
import { metricSum, programMapSums, startAgent, startReceiver } from "./agent";
import { argNumber, argText } from "./args";
import { NODE_H2C_SERVER, startPortServer } from "./overhead";
import { NetworkStat } from "../../src/collectors/network/spec";
import { quietConfig } from "../../test/helpers/quiet-config";

const WARM_SECONDS = argNumber("warm", 0);
const SETTLE_SECONDS = argNumber("settle", 2);
const TLS = argText("tls", "true");
const REQUESTS = argNumber("requests", 25_000);
const RINGBUF = argText("ringbuf-size", "auto");

async function h2load(args: string[]): Promise<number> {
  const p = Bun.spawn(["h2load", ...args], { stdout: "pipe", stderr: "pipe" });
  const out = await new Response(p.stdout).text();
  await p.exited;
  const m = /requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded/.exec(out);
  if (!m) throw new Error(`h2load gave no figure:\n${out}`);
  return Number(m[1]);
}

const receiver = await startReceiver();
const agent = await startAgent(
  quietConfig({
    endpoint: receiver.address,
    ebpf: `    enabled: true\n    ringbuf_size: ${RINGBUF}\n    network:\n      enabled: true\n      http: true\n      tls: ${TLS}\n    syscalls:\n      enabled: false`,
    agent: "  profiling:\n    enabled: false",
  }),
);
const server = await startPortServer(["node", "-e", NODE_H2C_SERVER]);
try {
  const url = `http://127.0.0.1:${server.port}/cold`;
  await Bun.sleep(SETTLE_SECONDS * 1000);
  if (WARM_SECONDS > 0) await h2load(["-D", String(WARM_SECONDS), "-c", "4", "-m", "10", url]);
  const stats = () => programMapSums(agent, "on_send_length", "stats", [NetworkStat.H2_STOPPED_LIMIT, NetworkStat.H2_STOPPED_RING, NetworkStat.H2_STOPPED_LOST, NetworkStat.H2_CUT, NetworkStat.HTTP_EVENTS]);
  const [before, stoppedBefore] = [await stats(), await metricSum(agent, 'svc_spans_dropped_total{reason="rate_limit"}')];
  const t0 = performance.now();
  const done = await Promise.all([0, 1, 2, 3].map(() => h2load(["-n", String(REQUESTS), "-c", "1", "-m", "10", url])));
  const seconds = (performance.now() - t0) / 1000;
  const after = await stats();
  const d = after.map((v, i) => v - before[i]!);
  const requests = done.reduce((a, b) => a + b, 0);
  console.log(`warm-up ${WARM_SECONDS} s, ring size ${RINGBUF}: 4 h2load processes, ${requests} requests in ${seconds.toFixed(1)} s (${Math.round(requests / seconds)}/s)`);
  console.log(`kernel: sockets stopped by http2_records_per_second ${d[0]}, by ring pressure ${d[1]}, by a lost record ${d[2]}; calls cut ${d[3]}; http_events records ${d[4]}`);
  console.log(`svc_spans_dropped_total{reason="rate_limit"} rose by ${(await metricSum(agent, 'svc_spans_dropped_total{reason="rate_limit"}')) - stoppedBefore} (stopped directions and span sampling together)`);
} finally {
  await server.stop();
  await agent.stop();
  await receiver.stop();
}
