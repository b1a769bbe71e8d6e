import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { AgentMetrics } from "../../../src/telemetry/metrics";
import { TaskRegistry } from "../../../src/telemetry/tasks";
import { redactConfig, secretsOf } from "../../../src/config/secrets";
import { parseConfig } from "../../../src/config/load";
import { SPEC_CATALOGUE } from "../../helpers/metric-catalogue";

const CATALOGUE = SPEC_CATALOGUE;

describe("metric catalogue", () => {
  test("every metric of the spec is exposed with HELP and TYPE under the namespace", async () => {
    const m = new AgentMetrics("svc", new TaskRegistry());
    const text = await m.render();
    for (const suffix of CATALOGUE) {
      const base = suffix.replace(/_total$/, "");
      expect(text).toContain(`# HELP svc_${suffix.endsWith("_total") && !text.includes(`# HELP svc_${suffix} `) ? base : suffix} `);
      expect(text).toMatch(new RegExp(`# TYPE svc_${base}(_total)? (counter|gauge|histogram)`));
    }
  });

  test("every series with known label values has a sample at 0 from the start (not only after its first event)", async () => {
    const m = new AgentMetrics("svc", new TaskRegistry());
    const text = await m.render();
    const ebpfBuffers = /^ebpf_(ringbuf|perf)_|^ebpf_map_entries$/; // label values come with the program sets (test/unit/ebpf)
    for (const suffix of CATALOGUE.filter((c) => !ebpfBuffers.test(c))) {
      const sample = suffix === "export_latency_seconds" || suffix === "export_batch_size" ? `${suffix}_count` : suffix;
      expect(text).toMatch(new RegExp(`^svc_${sample}(\\{[^}]*\\})? \\S+$`, "m"));
    }
    for (const plural of ["spans", "metrics", "logs", "profiles"])
      for (const reason of ["queue_full", "mem_limit", "permanent_error", "partial_success", "shutdown", "disk_full"])
        expect(text).toContain(`svc_${plural}_dropped_total{reason="${reason}"} 0\n`);
    expect(text).toContain(`svc_spans_dropped_total{reason="rate_limit"} 0\n`);
    for (const signal of ["traces", "metrics", "logs", "profiles"]) {
      for (const code of ["UNAVAILABLE", "DEADLINE_EXCEEDED", "UNAUTHENTICATED", "RESOURCE_EXHAUSTED", "INVALID_ARGUMENT"])
        expect(text).toContain(`svc_export_errors_total{signal="${signal}",code="${code}"} 0\n`);
      expect(text).toContain(`svc_export_latency_seconds_count{signal="${signal}"} 0\n`);
      expect(text).toContain(`svc_export_batch_size_count{signal="${signal}"} 0\n`);
    }
  });

  test("process figures are measured from /proc", async () => {
    const m = new AgentMetrics("svc", new TaskRegistry());
    const text = await m.render();
    const rss = Number(/svc_process_resident_memory_bytes (\d+)/.exec(text)![1]);
    const fds = Number(/svc_process_open_fds (\d+)/.exec(text)![1]);
    expect(rss).toBeGreaterThan(10 * 1024 * 1024);
    expect(fds).toBeGreaterThan(2);
  });

  test("go_goroutines counts live tasks", async () => {
    const tasks = new TaskRegistry();
    const m = new AgentMetrics("svc", tasks);
    const end = tasks.begin("reader");
    expect(await m.render()).toContain("svc_go_goroutines 2");
    end();
    end();
    expect(await m.render()).toContain("svc_go_goroutines 1");
  });

  test("the exposition is the one prom-client would write, and OpenMetrics names counter families without _total", async () => {
    const m = new AgentMetrics("svc", new TaskRegistry());
    m.spans.dropped.inc({ reason: "queue_full" }, 2);
    m.exportErrors.inc({ signal: "traces", code: 'we"ird\\' }, 1);
    m.exportLatency.observe({ signal: "logs" }, 0.3);
    m.exportLatency.observe({ signal: "logs" }, 1234.5);
    // Values the byte writer formats itself (integers) and those it leaves to String() (fractions, huge, negative, Inf; prom-client writes NaN as `Nan`, we write `NaN`).
    m.ebpfMapEntries.set({ map: "carte-é\nligne" }, 2 ** 40 + 1);
    m.ebpfMapEntries.set({ map: "zero" }, 0);
    m.ebpfMapEntries.set({ map: "neg" }, -3.25);
    m.ebpfMapEntries.set({ map: "huge" }, 1e21);
    m.ebpfMapEntries.set({ map: "max" }, Number.MAX_SAFE_INTEGER);
    m.ebpfMapEntries.set({ map: "inf" }, -Infinity);
    m.ebpfProgramsLoaded.set(9);
    const stable = (t: string) => t.split("\n").filter((l) => !/process_|go_goroutines/.test(l));
    expect(stable(await m.render())).toEqual(stable(await m.registry.metrics()));
    const om = await m.render(true);
    expect(om).toContain("# TYPE svc_spans_dropped counter\n");
    expect(om).toContain('svc_spans_dropped_total{reason="queue_full"} 2\n');
    expect(om).toEndWith("# EOF\n");
    // Rendering OpenMetrics leaves the Prometheus text unchanged (prom-client's own OpenMetrics mode renames counters in place).
    expect(await m.render()).toContain("svc_spans_dropped_total{reason=\"queue_full\"} 2");
  });

  test("scrapes after values changed are again the ones prom-client writes: a sample's kept bytes serve only while its values stay", async () => {
    const m = new AgentMetrics("svc", new TaskRegistry());
    const stable = (t: string) => t.split("\n").filter((l) => !/process_|go_goroutines/.test(l));
    const omOf = (t: string) => t.split("\n").filter((l) => /spans_dropped|export_latency|ebpf_map_entries/.test(l));
    m.spans.dropped.inc({ reason: "queue_full" }, 2);
    m.exportLatency.observe({ signal: "logs" }, 0.3);
    m.ebpfMapEntries.set({ map: "a" }, 5);
    for (let round = 0; round < 4; round++) {
      expect(stable(await m.render())).toEqual(stable(await m.registry.metrics()));
      const om = omOf(await m.render(true));
      expect(om).toContain(`svc_spans_dropped_total{reason="queue_full"} ${2 + round}`);
      expect(om).toContain(`svc_export_latency_seconds_count{signal="logs"} ${1 + round}`);
      expect(om).toContain(`svc_ebpf_map_entries{map="a"} ${round === 0 ? 5 : round * 10}`);
      // An unchanged scrape (every sample copied) is byte for byte the previous one.
      expect(stable(await m.render())).toEqual(stable(await m.render()));
      m.spans.dropped.inc({ reason: "queue_full" });
      // The same count and a sum moved would not happen (one observation moves both); a new observation moves the buckets.
      m.exportLatency.observe({ signal: "logs" }, round === 1 ? 5000 : 0.001);
      m.ebpfMapEntries.set({ map: "a" }, (round + 1) * 10);
    }
    // A reset: new sample objects, nothing kept is reused for them.
    m.exportLatency.reset();
    m.spans.dropped.reset();
    expect(stable(await m.render())).toEqual(stable(await m.registry.metrics()));
    expect(await m.render()).not.toContain('svc_export_latency_seconds_count{signal="logs"}');
  });

  test("renaming the namespace keeps the values", async () => {
    const m = new AgentMetrics("svc", new TaskRegistry());
    m.spans.collected.inc(7);
    m.exportLatency.observe({ signal: "traces" }, 0.02);
    m.setNamespace("agent");
    const text = await m.render();
    expect(text).toContain("agent_spans_collected_total 7");
    expect(text).toContain('agent_export_latency_seconds_bucket{le="0.025",signal="traces"} 1');
    expect(text).not.toContain("svc_");
    expect(await m.render(true)).toContain("agent_spans_collected_total 7");
  });
});

describe("secrets", () => {
  const c = parseConfig(
    "self_telemetry:\n  auth:\n    enabled: true\n    bearer_token: tok\n    read_only_tokens: [ro1]\notlp:\n  headers:\n    x-api-key: hdr\n    x-tenant: acme\n",
    {},
  );
  test("every secret is found for log scrubbing", () => {
    expect(secretsOf(c).sort()).toEqual(["acme", "hdr", "ro1", "tok"]);
  });
  test("the redacted view hides every secret and keeps the rest", () => {
    const r = redactConfig(c);
    const text = JSON.stringify(r);
    for (const s of ["tok", "ro1", "hdr", "acme"]) expect(text).not.toContain(`"${s}"`);
    expect(r.self_telemetry.auth.bearer_token).toBe("[REDACTED]");
    expect(r.otlp.headers["x-api-key"]).toBe("[REDACTED]");
    expect(r.otlp.endpoint).toBe(c.otlp.endpoint);
    expect(c.self_telemetry.auth.bearer_token).toBe("tok");
  });
});

test("every export_* metric is in the README's table; export_retries_total is 0 per signal before any export", async () => {
  const m = new AgentMetrics("svc", new TaskRegistry());
  const names = (await m.registry.getMetricsAsJSON()).map((x) => x.name.replace(/^svc_/, "")).filter((n) => n.startsWith("export_"));
  expect(names).toContain("export_retries_total");
  const readme = readFileSync(join(import.meta.dir, "../../../README.md"), "utf8");
  for (const n of names) expect({ n, documented: readme.includes(`| \`${n}\` |`) }).toEqual({ n, documented: true });
  const text = await m.registry.metrics();
  for (const s of ["traces", "metrics", "logs", "profiles"]) expect(text).toContain(`svc_export_retries_total{signal="${s}"} 0`);
});
