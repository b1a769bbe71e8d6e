/**
 * HTTP interface benchmark: requests/s of GET /healthz, /status and /metrics on the compiled agent, and of a raw
 * Bun.serve process serving the very same bytes (body and headers captured from the agent), in the same run,
 * with wrk on loopback (one wrk thread, 32 connections). Targets (issue 3): /healthz and /status >= 80% of raw,
 * /metrics >= 30% of raw with the full catalogue.
 *
 * Usage: bun bench/http.ts [--seconds N]
 */
import { report, type BenchRow } from "./lib/report";
import { startAgent, startReceiver } from "./lib/agent";
import { wrkRps } from "./lib/wrk";

const SECONDS = Number(process.argv[process.argv.indexOf("--seconds") + 1]) || 3;
const PATHS = [
  { path: "/healthz", target: 0.8 },
  { path: "/status", target: 0.8 },
  { path: "/metrics", target: 0.3 },
];

const CONFIG = `
self_telemetry:
  listen: 127.0.0.1:0
otlp:
  endpoint: \${OTLP_ENDPOINT}
agent:
  ebpf:
    enabled: false
  discovery:
    detect_kubernetes: false
    docker:
      enabled: false
    cloud:
      enabled: false
`;

const RAW_SERVER = `
const pages = JSON.parse(process.env.PAGES);
const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch(req) {
    const p = pages[new URL(req.url).pathname];
    return p ? new Response(p.body, { headers: p.headers }) : new Response("no", { status: 404 });
  },
});
console.log(server.port);
`;

const receiver = await startReceiver();
const agent = await startAgent(CONFIG, { OTLP_ENDPOINT: receiver.address });
try {
  const pages: Record<string, { body: string; headers: Record<string, string> }> = {};
  for (const { path } of PATHS) {
    const r = await fetch(agent.url + path);
    pages[path] = { body: await r.text(), headers: Object.fromEntries(r.headers) };
  }
  const raw2 = Bun.spawn([process.execPath, "-e", RAW_SERVER], { stdout: "pipe", env: { ...process.env, PAGES: JSON.stringify(pages) } });
  const reader = raw2.stdout.getReader();
  const first = new TextDecoder().decode((await reader.read()).value);
  const rawUrl = `http://127.0.0.1:${Number(first.trim())}`;

  const rows: BenchRow[] = [];
  for (const { path, target } of PATHS) {
    await wrkRps(agent.url + path, { seconds: 1 }); // warm-up (JIT)
    await wrkRps(rawUrl + path, { seconds: 1 });
    const a = await wrkRps(agent.url + path, { seconds: SECONDS });
    const b = await wrkRps(rawUrl + path, { seconds: SECONDS });
    rows.push({
      name: `GET ${path}`,
      agent: a,
      reference: b,
      referenceName: `raw Bun.serve, same ${pages[path]!.body.length} bytes`,
      unit: "requests/s",
      target: `>= ${target * 100}% of raw`,
      met: a >= target * b,
    });
  }
  raw2.kill();
  report({
    bench: "http: self-telemetry interface vs raw Bun.serve (wrk -t1 -c32, loopback)",
    rows,
    notes: [`${SECONDS}s per measurement after a 1s warm-up; agent and raw server each a separate process`],
  });
} finally {
  await agent.stop();
  await receiver.stop();
}
