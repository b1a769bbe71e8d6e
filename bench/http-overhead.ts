/**
 * HTTP tracing overhead: requests/s of a local HTTP server (Bun.serve in a child process) under wrk (one
 * thread, keep-alive connections, loopback) without the agent, and with the compiled agent (dist/svc-agent)
 * tracing it: ebpf/network with HTTP capture on (every read/write/recvfrom/sendto/readv/writev syscall of
 * every process goes through the tracepoints; exchanges up to max_spans_per_second become spans and are
 * exported to a local receiver). Rounds alternate off/on in the same run; medians are compared.
 * Target (issue 6): at most 5% fewer requests/s with tracing on.
 *
 * Usage: bun bench/http-overhead.ts [--seconds N] [--rounds R] [--connections C] [--spans-per-second S]
 */
import { report } from "./lib/report";
import { startAgent, startReceiver, type BenchAgent } from "./lib/agent";
import { wrkRps } from "./lib/wrk";

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const SECONDS = arg("seconds", 5);
const ROUNDS = arg("rounds", 3);
const CONNECTIONS = arg("connections", 16);
const SPANS_PER_SECOND = arg("spans-per-second", 1000);
const READY_TIMEOUT_MS = 30_000;
const TARGET_RATIO = 0.95;

const CONFIG = `
self_telemetry:
  listen: 127.0.0.1:0
otlp:
  endpoint: \${OTLP_ENDPOINT}
agent:
  ebpf:
    enabled: true
    network:
      enabled: \${NETWORK}
      http: \${HTTP}
      max_spans_per_second: ${SPANS_PER_SECOND}
  discovery:
    detect_kubernetes: false
    docker:
      enabled: false
    cloud:
      enabled: false
`;

const SERVER = `
const s = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch(req) { return new Response("hello " + new URL(req.url).pathname); } });
console.log(s.port);
`;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function metric(agent: BenchAgent, name: string): Promise<number> {
  const text = await (await fetch(`${agent.url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split("\n")) if (line.startsWith(name) && !line.startsWith("#")) sum += Number(line.split(" ").at(-1));
  return sum;
}

interface Variant {
  name: string;
  network: boolean;
  http: boolean;
  /** The headline row that carries the target. */
  target?: boolean;
}

const VARIANTS: Variant[] = [
  { name: "agent running, ebpf/network off", network: false, http: false },
  { name: "ebpf/network, HTTP capture off", network: true, http: false },
  { name: "ebpf/network + HTTP tracing", network: true, http: true, target: true },
];

async function startTracingAgent(otlp: string, v: Variant): Promise<BenchAgent> {
  const agent = await startAgent(CONFIG, { OTLP_ENDPOINT: otlp, NETWORK: String(v.network), HTTP: String(v.http) });
  const end = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    const ready = (await (await fetch(`${agent.url}/ready`)).json()) as { checks?: Record<string, string> };
    const view = (await (await fetch(`${agent.url}/status/ebpf`)).json()) as { programs?: Array<{ name: string; attached: boolean }> };
    const attached = new Set((view.programs ?? []).filter((p) => p.attached).map((p) => p.name));
    const wanted = [...(v.network ? ["on_set_state"] : []), ...(v.http ? ["exit_sendto"] : []), "handle_exec"];
    if (ready.checks?.ebpf === "ok" && wanted.every((n) => attached.has(n))) return agent;
    if (Date.now() > end) {
      await agent.stop();
      throw new Error(`ebpf/network did not attach: ${JSON.stringify(ready)} ${JSON.stringify([...attached])}`);
    }
    await Bun.sleep(50);
  }
}

const receiver = await startReceiver();
const server = Bun.spawn([process.execPath, "-e", SERVER], { stdout: "pipe", stderr: "inherit" });
try {
  const reader = server.stdout.getReader();
  const port = Number(new TextDecoder().decode((await reader.read()).value).trim());
  reader.releaseLock();
  const url = `http://127.0.0.1:${port}/bench?q=1`;
  await wrkRps(url, { seconds: 1, connections: CONNECTIONS });
  const off: number[] = [];
  const on = new Map<Variant, number[]>(VARIANTS.map((v) => [v, []]));
  let spans = 0;
  let rateLimited = 0;
  for (let r = 0; r < ROUNDS; r++) {
    off.push(await wrkRps(url, { seconds: SECONDS, connections: CONNECTIONS }));
    for (const v of VARIANTS) {
      const agent = await startTracingAgent(receiver.address, v);
      try {
        const before = await metric(agent, "svc_spans_collected_total");
        const droppedBefore = await metric(agent, 'svc_spans_dropped_total{reason="rate_limit"}');
        on.get(v)!.push(await wrkRps(url, { seconds: SECONDS, connections: CONNECTIONS }));
        if (v.http) {
          spans += (await metric(agent, "svc_spans_collected_total")) - before;
          rateLimited += (await metric(agent, 'svc_spans_dropped_total{reason="rate_limit"}')) - droppedBefore;
        }
      } finally {
        await agent.stop();
      }
    }
    console.log(`round ${r + 1}: off ${Math.round(off.at(-1)!)} req/s; ${VARIANTS.map((v) => `${v.name} ${Math.round(on.get(v)!.at(-1)!)}`).join("; ")}`);
  }
  const offM = median(off);
  report({
    bench: `HTTP tracing overhead (wrk -t1 -c${CONNECTIONS}, ${SECONDS}s x ${ROUNDS} rounds, medians)`,
    rows: VARIANTS.map((v) => {
      const m = median(on.get(v)!);
      return { name: `Bun.serve requests/s, ${v.name}`, agent: m, reference: offM, referenceName: "agent not running", unit: "req/s", ...(v.target ? { target: ">= 95% of untraced", met: m / offM >= TARGET_RATIO } : {}) };
    }),
    notes: [
      `rounds off: ${off.map(Math.round).join(", ")}; ${VARIANTS.map((v) => `${v.name}: ${on.get(v)!.map(Math.round).join(", ")}`).join("; ")}`,
      `spans collected while HTTP tracing: ${spans} (server and wrk client spans, ${SPANS_PER_SECOND}/s cap); exchanges over the cap (not captured, counted as rate_limit drops): ${rateLimited}`,
    ],
  });
} finally {
  server.kill();
  await server.exited;
  await receiver.stop();
}
