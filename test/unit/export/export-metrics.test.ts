/** The export metrics of the catalogue: every one documented in the README, the retry counter present from the start. */
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { AgentMetrics } from "../../../src/telemetry/metrics";
import { TaskRegistry } from "../../../src/telemetry/tasks";

test("every export_* metric is in the README's table; export_retries_total is 0 per signal before any export", async () => {
  const m = new AgentMetrics("svc", new TaskRegistry());
  const names = (await m.registry.getMetricsAsJSON()).map((x) => x.name.replace(/^svc_/, "")).filter((n) => n.startsWith("export_"));
  expect(names).toContain("export_retries_total");
  const readme = readFileSync(join(import.meta.dir, "../../../README.md"), "utf8");
  for (const n of names) expect({ n, documented: readme.includes(`| \`${n}\` |`) }).toEqual({ n, documented: true });
  const text = await m.registry.metrics();
  for (const s of ["traces", "metrics", "logs", "profiles"]) expect(text).toContain(`svc_export_retries_total{signal="${s}"} 0`);
});
