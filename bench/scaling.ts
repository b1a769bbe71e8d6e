/**
 * Scaling of the self-telemetry reads, in process (the agent's own Elysia app answering `app.handle`, no
 * socket, so the figures are the handler's cost and not loopback HTTP):
 *   1. GET /metrics scrape time vs number of series (1k, 10k, 100k `ebpf_map_entries{map=...}` series added to
 *      the agent's metric catalogue), against prom-client's own `Registry.metrics()` over the same registry,
 *      measured in the same run; and a scrape of `prometheus-node-exporter` on loopback (when installed) as the
 *      reference exporter at its own series count.
 *   2. GET /status/ebpf vs maps in the view (10, 1,000, 10,000 synthetic maps published through
 *      StatusAggregator.provide), against JSON.stringify of the same view.
 *   3. GET /status/discovery vs discovered pods (10, 1,000, 10,000; worst case: one service per pod in
 *      discovered_services), against JSON.stringify of the same view.
 * Targets: none given by the issue for the curves; a scrape of 10k series under 100 ms is printed as a guide.
 *
 * Usage: bun bench/scaling.ts [--series 1000,10000,100000] [--sizes 10,1000,10000] [--min-ms 300]
 */
import { Registry } from "prom-client";
import { inProcessAgent } from "../test/helpers/in-process";
import { QUIET_CONFIG } from "../test/helpers/agent-process";
import { EBPF_STATUS, type EbpfView } from "../src/ebpf/status";
import { DISCOVERY_STATUS, type DiscoveryView } from "../src/discovery/status";
import { report, type BenchRow } from "./lib/report";
import { meanMs, type BenchResultWithCurves, type Curve } from "./lib/curves";
import { argNumber, argText } from "./lib/args";

const SERIES = argText("series", "1000,10000,100000").split(",").map(Number);
const SIZES = argText("sizes", "10,1000,10000").split(",").map(Number);
const MIN_MS = argNumber("min-ms", 300);
const SCRAPE_10K_TARGET_MS = 100;
const NODE_EXPORTER = "prometheus-node-exporter";

const h = await inProcessAgent(QUIET_CONFIG, { backend: false, start: false });
const get = async (path: string) => {
  const r = await h.app.handle(new Request(`http://localhost${path}`));
  if (r.status !== 200) throw new Error(`${path}: ${r.status}`);
  return r.text();
};

// 1. /metrics vs series.
const baseSeries = (await get("/metrics")).split("\n").filter((l) => l && !l.startsWith("#")).length;
const scrape: number[] = [];
const promClient: number[] = [];
const bytes: number[] = [];
let added = 0;
for (const n of SERIES) {
  for (; added < n; added++) h.agent.metrics.ebpfMapEntries.set({ map: `bench_map_${added}` }, added);
  const text = await get("/metrics");
  const lines = text.split("\n").filter((l) => l && !l.startsWith("#")).length;
  if (lines < n) throw new Error(`/metrics has ${lines} series, expected at least ${n}`);
  bytes.push(text.length);
  scrape.push(await meanMs(() => get("/metrics"), 3, MIN_MS));
  const registry: Registry = h.agent.metrics.registry;
  promClient.push(await meanMs(() => registry.metrics(), 3, MIN_MS));
  console.log(`metrics: ${n} series (+${baseSeries} catalogue): GET /metrics ${scrape.at(-1)!.toFixed(2)} ms, prom-client Registry.metrics() ${promClient.at(-1)!.toFixed(2)} ms, ${text.length} bytes`);
}
h.agent.metrics.ebpfMapEntries.reset();

async function nodeExporter(): Promise<{ series: number; ms: number } | undefined> {
  if (!Bun.which(NODE_EXPORTER)) return undefined;
  const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = probe.port;
  probe.stop(true);
  const proc = Bun.spawn([NODE_EXPORTER, `--web.listen-address=127.0.0.1:${port}`], { stdout: "ignore", stderr: "ignore" });
  try {
    const url = `http://127.0.0.1:${port}/metrics`;
    const deadline = Date.now() + 10_000;
    for (;;) {
      const ok = await fetch(url).then((r) => r.ok, () => false);
      if (ok) break;
      if (Date.now() > deadline) return undefined;
      await Bun.sleep(20);
    }
    const text = await (await fetch(url)).text();
    const series = text.split("\n").filter((l) => l && !l.startsWith("#")).length;
    const ms = await meanMs(() => fetch(url).then((r) => r.text()), 3, MIN_MS);
    return { series, ms };
  } finally {
    proc.kill();
    await proc.exited;
  }
}
const ne = await nodeExporter();
/** The agent's /metrics over loopback HTTP (Bun.serve around the same app) with as many series as node-exporter's. */
async function agentOverHttp(series: number): Promise<number> {
  for (let i = 0; i < series; i++) h.agent.metrics.ebpfMapEntries.set({ map: `bench_map_${i}` }, i);
  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (r) => h.app.handle(r) });
  try {
    const url = `http://127.0.0.1:${server.port}/metrics`;
    return await meanMs(() => fetch(url).then((r) => r.text()), 3, MIN_MS);
  } finally {
    server.stop(true);
    h.agent.metrics.ebpfMapEntries.reset();
  }
}
const agentHttpMs = ne ? await agentOverHttp(Math.max(0, ne.series - baseSeries)) : undefined;

// 2. /status/ebpf vs maps.
const ebpfView = (maps: number): EbpfView => ({
  enabled: true,
  programs: Array.from({ length: Math.min(maps, 64) }, (_, i) => ({ name: `prog_${i}`, type: "tracepoint", attached: true, id: 100 + i })),
  maps: Array.from({ length: maps }, (_, i) => ({ name: `map_${i}`, type: i % 3 ? "hash" : "percpu_array", entries: i * 7, max_entries: 65536 })),
  ringbuf: { size: 16 << 20, events_received: 123_456_789, events_lost: 0 },
});
const discoveryView = (pods: number): DiscoveryView => ({
  kubernetes: { enabled: true, connected: true, cluster: "bench", namespace: "default", pods_watched: pods, services_watched: pods },
  docker: { enabled: true, connected: true, containers: pods },
  cloud: { provider: "none", region: "", instance_id: "" },
  discovered_services: Array.from({ length: pods }, (_, i) => ({ name: `svc-${i}`, namespace: `ns-${i % 10}`, instances: 1 + (i % 3), ports: [80, 8080] })),
});

const ebpfMs: number[] = [];
const ebpfRef: number[] = [];
const discMs: number[] = [];
const discRef: number[] = [];
for (const n of SIZES) {
  const ev = ebpfView(n);
  h.agent.status.provide(EBPF_STATUS.name, () => ev);
  const body = JSON.parse(await get("/status/ebpf")) as EbpfView;
  if (body.maps.length !== n) throw new Error(`/status/ebpf has ${body.maps.length} maps, expected ${n}`);
  ebpfMs.push(await meanMs(() => get("/status/ebpf"), 5, MIN_MS));
  ebpfRef.push(await meanMs(() => JSON.stringify(ev), 5, MIN_MS));
  const dv = discoveryView(n);
  h.agent.status.provide(DISCOVERY_STATUS.name, () => dv);
  const dbody = JSON.parse(await get("/status/discovery")) as DiscoveryView;
  if (dbody.discovered_services.length !== n) throw new Error(`/status/discovery has ${dbody.discovered_services.length} services, expected ${n}`);
  discMs.push(await meanMs(() => get("/status/discovery"), 5, MIN_MS));
  discRef.push(await meanMs(() => JSON.stringify(dv), 5, MIN_MS));
  console.log(`status: ${n}: /status/ebpf ${ebpfMs.at(-1)!.toFixed(3)} ms (stringify ${ebpfRef.at(-1)!.toFixed(3)}), /status/discovery ${discMs.at(-1)!.toFixed(3)} ms (stringify ${discRef.at(-1)!.toFixed(3)})`);
}
await h.stop();

const rows: BenchRow[] = [];
SERIES.forEach((n, i) =>
  rows.push({
    name: `GET /metrics, ${n.toLocaleString("en-US")} series`,
    agent: scrape[i]!,
    reference: promClient[i]!,
    referenceName: "prom-client Registry.metrics(), same registry",
    unit: "ms",
    ...(n === 10_000 ? { target: `< ${SCRAPE_10K_TARGET_MS} ms (guide)`, met: scrape[i]! < SCRAPE_10K_TARGET_MS } : {}),
  }),
);
if (ne && agentHttpMs !== undefined) {
  rows.push({
    name: `GET /metrics over loopback HTTP, ${ne.series} series (as many as node-exporter's)`,
    agent: agentHttpMs,
    reference: ne.ms,
    referenceName: `prometheus-node-exporter, its ${ne.series} series`,
    unit: "ms",
  });
}
SIZES.forEach((n, i) => {
  rows.push({ name: `GET /status/ebpf, ${n.toLocaleString("en-US")} maps`, agent: ebpfMs[i]!, reference: ebpfRef[i]!, referenceName: "JSON.stringify of the view", unit: "ms" });
  rows.push({ name: `GET /status/discovery, ${n.toLocaleString("en-US")} pods/services`, agent: discMs[i]!, reference: discRef[i]!, referenceName: "JSON.stringify of the view", unit: "ms" });
});

const curves: Curve[] = [
  {
    id: "scaling-metrics",
    title: "GET /metrics time vs series",
    xLabel: "series",
    yLabel: "ms per scrape",
    unit: "ms",
    x: SERIES,
    xLog: true,
    yLog: true,
    series: [
      { name: "svc-agent GET /metrics (app.handle)", y: scrape },
      { name: "prom-client Registry.metrics()", y: promClient },
    ],
  },
  {
    id: "scaling-status",
    title: "GET /status/ebpf and /status/discovery vs size",
    xLabel: "maps or pods",
    yLabel: "ms per request",
    unit: "ms",
    x: SIZES,
    xLog: true,
    yLog: true,
    series: [
      { name: "/status/ebpf (maps)", y: ebpfMs },
      { name: "JSON.stringify ebpf view", y: ebpfRef },
      { name: "/status/discovery (pods)", y: discMs },
      { name: "JSON.stringify discovery view", y: discRef },
    ],
  },
];

const result: BenchResultWithCurves = {
  bench: "scaling: /metrics vs series, /status/ebpf and /status/discovery vs size (in-process app.handle)",
  rows,
  curves,
  notes: [
    `series are ebpf_map_entries{map=...} gauges added to the agent's catalogue (${baseSeries} series of its own on top); /metrics bytes: ${bytes.map((b, i) => `${SERIES[i]}: ${b}`).join(", ")}`,
    "status views are synthetic, published through StatusAggregator.provide; discovery worst case: one discovered service per pod",
    `mean over >= ${MIN_MS} ms of repeated calls after one warm-up call; one process, single-threaded`,
  ],
};
report(result);
