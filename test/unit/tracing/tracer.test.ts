/** The tracer against a fake pipeline: sampling by trace id, parent-child through async context, outcomes. */
import { describe, expect, test } from "bun:test";
import type { Config } from "../../../src/config/schema";
import type { SpanItem } from "../../../src/export/model";
import { TaskRegistry } from "../../../src/telemetry/tasks";
import { sampledByTraceId, setSpanAttributes, suppressTracing, Tracer } from "../../../src/tracing";

function setup(enabled: boolean, sample_rate: number) {
  const tasks = new TaskRegistry();
  const spans: SpanItem[] = [];
  const config = { self_telemetry: { tracing: { enabled, sample_rate } } } as unknown as Config;
  const tracer = new Tracer({ config: () => config, pipeline: { submit: (_s, items) => (spans.push(...(items as SpanItem[])), items.length) } });
  tasks.observers.add(tracer);
  return { tasks, spans, config };
}

const hex = (b: Uint8Array | undefined) => (b ? Buffer.from(b).toString("hex") : undefined);

describe("sampledByTraceId", () => {
  test("deterministic, and the fraction follows the rate", () => {
    const id = new Uint8Array(16).fill(0xab);
    expect(sampledByTraceId(id, 0.5)).toBe(sampledByTraceId(id, 0.5));
    expect(sampledByTraceId(id, 1)).toBe(true);
    expect(sampledByTraceId(id, 0)).toBe(false);
    let hits = 0;
    const N = 20_000;
    for (let i = 0; i < N; i++) if (sampledByTraceId(crypto.getRandomValues(new Uint8Array(16)), 0.1)) hits++;
    expect(hits / N).toBeGreaterThan(0.08);
    expect(hits / N).toBeLessThan(0.12);
  });
});

describe("Tracer", () => {
  test("nested tracked operations form one trace with parent links; tasks are not spans", async () => {
    const { tasks, spans } = setup(true, 1);
    const endTask = tasks.begin("long-running reader", "task");
    await tasks.track("outer", async () => {
      setSpanAttributes({ "svc.answer": 42 });
      await tasks.track("inner", async () => undefined);
    });
    endTask();
    expect(spans.map((s) => s.name)).toEqual(["inner", "outer"]);
    const [inner, outer] = spans as [SpanItem, SpanItem];
    expect(hex(inner.traceId)).toBe(hex(outer.traceId));
    expect(hex(inner.parentSpanId)).toBe(hex(outer.spanId));
    expect(outer.parentSpanId).toBeUndefined();
    expect(outer.attributes?.["svc.answer"]).toBe(42);
    // No resource: the agent's own (configured service_name and telemetry.sdk.*) is given by the pipeline.
    expect(outer.resource).toBeUndefined();
    expect(outer.endTimeUnixNano >= outer.startTimeUnixNano).toBe(true);
  });

  test("a failed operation has status ERROR with the message", async () => {
    const { tasks, spans } = setup(true, 1);
    await expect(tasks.track("fails", async () => Promise.reject(new Error("boom")))).rejects.toThrow("boom");
    expect(spans[0]!.status).toEqual({ code: 2, message: "boom" });
  });

  test("children follow the root's sampling decision; rate 0 and disabled produce nothing", async () => {
    const { tasks, spans, config } = setup(true, 0);
    await tasks.track("root", () => tasks.track("child", async () => undefined));
    expect(spans.length).toBe(0);
    config.self_telemetry.tracing.sample_rate = 1;
    config.self_telemetry.tracing.enabled = false;
    await tasks.track("root", async () => undefined);
    expect(spans.length).toBe(0);
  });

  test("suppressTracing: nothing inside is traced", async () => {
    const { tasks, spans } = setup(true, 1);
    await suppressTracing(() => tasks.track("export traces", async () => undefined));
    expect(spans.length).toBe(0);
  });

  test("an HTTP request (begin/end) is a SERVER root span with its status code", () => {
    const { tasks, spans } = setup(true, 1);
    const end = tasks.begin("http POST /admin/flush", "operation");
    end({ attributes: { "http.response.status_code": 200 } });
    expect(spans[0]!.kind).toBe(2);
    expect(spans[0]!.name).toBe("POST /admin/flush");
    expect(spans[0]!.attributes).toMatchObject({ "http.request.method": "POST", "url.path": "/admin/flush", "url.scheme": "http", "http.route": "/admin/flush", "http.response.status_code": 200 });
    expect(spans[0]!.attributes).not.toHaveProperty("error.type");
  });

  test("HTTP spans per the conventions: parameter routes as templates, no route for 404, _OTHER methods, error.type on 5xx", () => {
    const { tasks, spans } = setup(true, 1);
    tasks.begin("http GET /debug/pprof/heap", "operation")({ attributes: { "http.response.status_code": 200 } });
    tasks.begin("http GET /nope", "operation")({ attributes: { "http.response.status_code": 404 } });
    tasks.begin("http BREW /status", "operation")({ attributes: { "http.response.status_code": 405 } });
    tasks.begin("http POST /admin/reload", "operation")({ attributes: { "http.response.status_code": 500 } });
    expect(spans.map((s) => s.name)).toEqual(["GET /debug/pprof/{profile}", "GET", "HTTP /status", "POST /admin/reload"]);
    expect(spans[0]!.attributes).toMatchObject({ "http.route": "/debug/pprof/{profile}", "url.path": "/debug/pprof/heap" });
    expect(spans[1]!.attributes).not.toHaveProperty("http.route");
    expect(spans[2]!.attributes).toMatchObject({ "http.request.method": "_OTHER", "http.request.method_original": "BREW" });
    expect(spans[3]!.attributes).toMatchObject({ "error.type": "500" });
    expect(spans[3]!.status?.code).toBe(2);
  });
});
