/**
 * /metrics formatting in process: the agent's exposition (src/telemetry/exposition.ts, which reads prom-client's
 * stored samples) against prom-client's public `Registry.metrics()`, over the agent's own registry with the
 * label sets of a busy agent (12 signals x outcomes, 40 task names). `bun bench/exposition.ts [--runs N]`.
 */
import { AgentMetrics } from "../src/telemetry/metrics";
import { expositionBytes } from "../src/telemetry/exposition";
import { TaskRegistry } from "../src/telemetry/tasks";
import { report } from "./lib/report";

const args = process.argv.slice(2);
const RUNS = Number(args[args.indexOf("--runs") + 1] || 2000) || 2000;

const tasks = new TaskRegistry();
const metrics = new AgentMetrics("svc", tasks);
for (let i = 0; i < 40; i++) await tasks.track(`operation ${i}`, async () => undefined);
const registry = metrics.registry;

async function usPerCall(f: () => Promise<unknown>): Promise<number> {
  for (let i = 0; i < RUNS / 10; i++) await f();
  const t0 = performance.now();
  for (let i = 0; i < RUNS; i++) await f();
  return ((performance.now() - t0) * 1000) / RUNS;
}

const ours = await usPerCall(() => expositionBytes(registry, false));
const theirs = await usPerCall(async () => new TextEncoder().encode(await registry.metrics()));
const lines = (await registry.metrics()).split("\n").length;
report({
  bench: "exposition",
  rows: [{ name: `Prometheus text of the agent's registry (${lines} lines), µs per scrape`, agent: ours, reference: theirs, referenceName: "prom-client Registry.metrics() + UTF-8 encoding", unit: "µs" }],
});
