/**
 * Self-tracing through the agent's own pipeline to an in-process OTLP receiver: with sample_rate 1.0 every admin
 * action produces spans of service svc-agent (the reload nested under its HTTP request); with 0.01 about 1% of
 * operations are traced; with tracing off none.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { decodeRequest } from "../../../src/export/receiver";
import { inProcessAgent, stopAllAgents, type InProcessAgent } from "../../helpers/in-process";
import { waitUntil } from "../../helpers/wait";
import { quietConfig } from "../../helpers/quiet-config";

afterAll(stopAllAgents);

const config = (enabled: boolean, rate: number) =>
  quietConfig({ selfTelemetry: `  tracing:\n    enabled: ${enabled}\n    sample_rate: ${rate}`, otlp: "  insecure: true" });

interface Span {
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  kind?: string;
  attributes?: Array<{ key: string; value: Record<string, unknown> }>;
}

/** Every span the receiver got, with its resource's service.name. */
function spansOf(a: InProcessAgent): Array<Span & { service: string }> {
  const out: Array<Span & { service: string }> = [];
  for (const r of a.received) {
    if (r.signal !== "traces") continue;
    const body = decodeRequest("traces", r.body) as {
      resourceSpans?: Array<{ resource?: { attributes?: Array<{ key: string; value: { stringValue?: string } }> }; scopeSpans?: Array<{ spans?: Span[] }> }>;
    };
    for (const rs of body.resourceSpans ?? []) {
      const service = rs.resource?.attributes?.find((x) => x.key === "service.name")?.value.stringValue ?? "";
      for (const ss of rs.scopeSpans ?? []) for (const s of ss.spans ?? []) out.push({ ...s, service });
    }
  }
  return out;
}

describe("self-tracing", () => {
  test("sample_rate 1.0: every admin action produces a span at the receiver, reload nested under its request", async () => {
    const a = await inProcessAgent(config(true, 1.0), { forceDebug: true });
    const ACTIONS = 4;
    for (let i = 0; i < ACTIONS; i++) {
      expect((await a.request("/admin/reload", { method: "POST" })).status).toBe(200);
      expect((await a.request("/admin/flush", { method: "POST" })).status).toBe(200);
    }
    await waitUntil(
      async () => {
        await a.deps.pipeline.flush(2000);
        const s = spansOf(a);
        return s.filter((x) => x.name === "POST /admin/flush").length >= ACTIONS && s.filter((x) => x.name === "reload (admin)").length >= ACTIONS;
      },
      { what: "spans of every admin action at the receiver", timeoutMs: 20_000 },
    );
    const spans = spansOf(a);
    const reloadRequests = spans.filter((s) => s.name === "POST /admin/reload");
    const reloads = spans.filter((s) => s.name === "reload (admin)");
    expect(reloadRequests.length).toBe(ACTIONS);
    expect(reloads.length).toBe(ACTIONS);
    for (const s of spans) expect(s.service).toBe("svc-agent");
    for (const r of reloads) {
      const parent = reloadRequests.find((q) => q.spanId === r.parentSpanId);
      expect(parent).toBeDefined();
      expect(parent!.traceId).toBe(r.traceId);
    }
    const flushRequests = spans.filter((s) => s.name === "POST /admin/flush");
    const flushes = spans.filter((s) => s.name === "flush" && flushRequests.some((q) => q.spanId === s.parentSpanId));
    expect(flushes.length).toBe(ACTIONS);
    const status = reloadRequests[0]!.attributes?.find((x) => x.key === "http.response.status_code")?.value;
    expect(Number(status?.intValue)).toBe(200);
    expect(reloadRequests[0]!.kind).toBe("SPAN_KIND_SERVER");
    await a.stop();
  }, 30_000);

  test("export batches are operations: a logs batch becomes a span, trace batches are not traced (no feedback loop)", async () => {
    const a = await inProcessAgent(config(true, 1.0));
    const now = BigInt(Date.now()) * 1_000_000n;
    a.agent.ctx.pipeline.submit("logs", [{ observedTimeUnixNano: now, body: "hello" }]);
    await waitUntil(
      async () => {
        await a.deps.pipeline.flush(2000);
        return spansOf(a).some((x) => x.name === "export batch logs");
      },
      { what: "a span of the logs export batch", timeoutMs: 20_000 },
    );
    await a.deps.pipeline.flush(2000);
    expect(spansOf(a).filter((x) => x.name === "export batch traces")).toEqual([]);
    await a.stop();
  }, 30_000);

  test("discovery refreshes are operations: a cloud metadata query becomes a span (here against a closed loopback port)", async () => {
    const closed = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    const port = closed.port;
    closed.stop(true);
    const yaml = config(true, 1.0).replace(
      "    cloud:\n      enabled: false\n",
      `    cloud:\n      enabled: true\n      provider: aws\n      timeout: 200ms\n      endpoints:\n        aws: http://127.0.0.1:${port}\n`,
    );
    const a = await inProcessAgent(yaml, { waitReady: false });
    await waitUntil(
      async () => {
        await a.deps.pipeline.flush(2000);
        return spansOf(a).some((x) => x.name === "discovery/cloud aws metadata query");
      },
      { what: "a span of the cloud metadata query", timeoutMs: 20_000 },
    );
    await a.stop();
  }, 30_000);

  test("sample_rate 0.01: about 1% of operations are traced (statistical, wide bound)", async () => {
    const a = await inProcessAgent(config(true, 0.01));
    const N = 3000;
    for (let i = 0; i < N; i++) await a.request("/admin/flush", { method: "POST" });
    // Request spans end after the response (onAfterResponse): wait for every request to have ended.
    await waitUntil(() => !a.agent.tasks.list().some((t) => t.name.startsWith("http ")), { what: "requests to end" });
    await a.deps.pipeline.flush(5000);
    console.log(`sample_rate 0.01: traced ${spansOf(a).filter((s) => s.name === "POST /admin/flush").length} of ${N} requests`);
    const traced = spansOf(a).filter((s) => s.name === "POST /admin/flush").length;
    // Binomial(3000, 0.01): mean 30, sd ~5.4; [8, 60] is beyond 4 sd on both sides.
    expect(traced).toBeGreaterThanOrEqual(8);
    expect(traced).toBeLessThanOrEqual(60);
    await a.stop();
  }, 60_000);

  test("a reload turns tracing on and off: spans only for the requests made while it was on", async () => {
    const a = await inProcessAgent(config(false, 1.0));
    const flushes = async (n: number) => {
      for (let i = 0; i < n; i++) await a.request("/admin/flush", { method: "POST" });
      await waitUntil(() => !a.agent.tasks.list().some((t) => t.name.startsWith("http ")), { what: "requests to end" });
      await a.deps.pipeline.flush(2000);
    };
    const traced = () => spansOf(a).filter((s) => s.name === "POST /admin/flush").length;
    await flushes(3);
    expect(traced()).toBe(0);
    a.writeConfig(config(true, 1.0));
    await a.agent.reload("test");
    await flushes(4);
    await waitUntil(() => traced() >= 4, { what: "spans of the requests made while tracing was on" });
    a.writeConfig(config(false, 1.0));
    await a.agent.reload("test");
    await flushes(5);
    expect(traced()).toBe(4);
    await a.stop();
  }, 30_000);

  test("tracing disabled: no spans", async () => {
    const a = await inProcessAgent(config(false, 1.0));
    for (let i = 0; i < 5; i++) await a.request("/admin/flush", { method: "POST" });
    await waitUntil(() => !a.agent.tasks.list().some((t) => t.name.startsWith("http ")), { what: "requests to end" });
    await a.deps.pipeline.flush(2000);
    expect(spansOf(a).length).toBe(0);
    await a.stop();
  }, 30_000);
});
