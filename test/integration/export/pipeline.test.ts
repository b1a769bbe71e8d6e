/**
 * The export pipeline against an in-process OTLP/gRPC receiver on port 0: batching, compression, headers,
 * retry per the OTLP specification, drops by reason, partial success, flush, shutdown, and exact accounting.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { status as GrpcStatus } from "@grpc/grpc-js";
import { PROTOCOLS, TestBackend, expectExactAccounting, harness, spans, testConfig, waitUntil, type Harness } from "./harness";
import type { Protocol } from "../../../src/export/config";
import { OtlpReceiver } from "../../../src/export/receiver";
import { closedLoopbackPort } from "../../helpers/ports";

const open: Array<{ stop(): Promise<void> }> = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.stop();
});

async function setup(configOver: Parameters<typeof testConfig>[0] = {}, backendOptions = {}, protocol: Protocol = "grpc") {
  const backend = await new TestBackend({ ...backendOptions, protocol }).start();
  open.push(backend);
  const h = harness(testConfig({ ...configOver, otlp: { endpoint: backend.endpoint, protocol, ...configOver.otlp } }));
  open.push(h);
  await h.start();
  return { backend, h };
}

describe("batching", () => {
  test("a full batch is sent at once; the rest waits for batch_timeout or a flush", async () => {
    const { backend, h } = await setup({ queues: { traces: { batch_size: 10, batch_timeout: "1h" } } });
    expect(h.pipeline.submit("traces", spans(25))).toBe(25);
    await waitUntil(() => backend.items() === 20, { what: "two full batches" });
    expect(backend.requests.map((r) => r.items)).toEqual([10, 10]);
    expect(h.pipeline.accounting().traces.queued).toBe(5);
    await expectExactAccounting(h);
    expect((await h.pipeline.flush(5000)).exported).toEqual({ traces: 5, metrics: 0, logs: 0, profiles: 0 });
    expect(backend.requests.map((r) => r.items)).toEqual([10, 10, 5]);
    await expectExactAccounting(h);
  });

  test("a partial batch is sent after batch_timeout", async () => {
    const { backend, h } = await setup({ queues: { traces: { batch_size: 100, batch_timeout: "30ms" } } });
    h.pipeline.submit("traces", spans(3));
    expect(backend.items()).toBe(0);
    await waitUntil(() => backend.items() === 3, { what: "the partial batch" });
    expect(backend.requests).toHaveLength(1);
    const acc = h.pipeline.accounting().traces;
    expect(acc).toMatchObject({ collected: 3, exported: 3, queued: 0, inFlight: 0, droppedTotal: 0 });
    await expectExactAccounting(h);
  });
});

for (const protocol of PROTOCOLS) {
  describe(`transport over ${protocol}`, () => {
    test("gzip on the wire when otlp.compression is gzip, identity when none", async () => {
      const gz = await setup({ otlp: { compression: "gzip" } }, {}, protocol);
      gz.h.pipeline.submit("traces", spans(5));
      await gz.h.pipeline.flush(5000);
      expect(gz.backend.requests[0]!.encoding).toBe("gzip");
      const plain = await setup({ otlp: { compression: "none" } }, {}, protocol);
      plain.h.pipeline.submit("traces", spans(5));
      await plain.h.pipeline.flush(5000);
      expect(plain.backend.requests[0]!.encoding).toBe("identity");
      await expectExactAccounting(gz.h);
    });

    test("otlp.headers arrive as gRPC metadata or HTTP headers", async () => {
      const { backend, h } = await setup({ otlp: { headers: { "x-api-key": "s3cret", "X-Tenant": "blue" } } }, {}, protocol);
      h.pipeline.submit("logs", [{ observedTimeUnixNano: 1n, body: "hello" }]);
      await h.pipeline.flush(5000);
      expect(backend.requests[0]!.metadata["x-api-key"]).toBe("s3cret");
      expect(backend.requests[0]!.metadata["x-tenant"]).toBe("blue");
      await expectExactAccounting(h);
    });

    test("resource attributes: service.name, host.name, os.type and contributed attributes on every export", async () => {
      const { backend, h } = await setup({ service_name: "checkout-agent" }, {}, protocol);
      h.pipeline.setResourceAttributes("discovery/cloud", { "cloud.provider": "aws", "cloud.region": "eu-west-1" });
      h.pipeline.submit("traces", spans(1));
      await h.pipeline.flush(5000);
      const { decodeRequest } = await import("../../../src/export/receiver");
      const req = decodeRequest("traces", backend.requests[0]!.body) as {
        resourceSpans: Array<{ resource: { attributes: Array<{ key: string; value: { stringValue?: string } }> } }>;
      };
      const attrs = Object.fromEntries(req.resourceSpans[0]!.resource.attributes.map((a) => [a.key, a.value.stringValue]));
      expect(attrs["service.name"]).toBe("checkout-agent");
      expect(attrs["host.name"]).toBe((await import("node:os")).hostname());
      expect(attrs["os.type"]).toBe("linux");
      expect(attrs["cloud.provider"]).toBe("aws");
      expect(attrs["cloud.region"]).toBe("eu-west-1");
    });

    test("resource_attributes are on the agent's own resource, never on a workload's", async () => {
      const { backend, h } = await setup({ resource_attributes: { "deployment.environment": "prod" } }, {}, protocol);
      h.pipeline.submit("traces", [...spans(1), { ...spans(1)[0]!, resource: { "service.name": "shop" } }]);
      await h.pipeline.flush(5000);
      const { decodeRequest } = await import("../../../src/export/receiver");
      const req = decodeRequest("traces", backend.requests[0]!.body) as {
        resourceSpans: Array<{ resource: { attributes: Array<{ key: string; value: { stringValue?: string } }> } }>;
      };
      const resources = req.resourceSpans.map((rs) => Object.fromEntries(rs.resource.attributes.map((a) => [a.key, a.value.stringValue])));
      expect(resources).toHaveLength(2);
      const own = resources.find((r) => r["service.name"] === "svc-agent")!;
      const shop = resources.find((r) => r["service.name"] === "shop")!;
      expect(own["deployment.environment"]).toBe("prod");
      expect(shop["deployment.environment"]).toBeUndefined();
    });
  });
}

describe("retry per the OTLP specification", () => {
  const RETRYABLE = ["CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE", "DATA_LOSS"] as const;
  for (const name of RETRYABLE) {
    test(`${name} is retried with backoff and the batch is then exported`, async () => {
      const { backend, h } = await setup({ backoff: { initial: "40ms", max: "1s" } });
      backend.script = [
        { ok: false, code: GrpcStatus[name], message: `scripted ${name}` },
        { ok: false, code: GrpcStatus[name], message: `scripted ${name}` },
      ];
      h.pipeline.submit("traces", spans(4));
      await waitUntil(() => h.pipeline.accounting().traces.exported === 4, { what: "export after retries" });
      expect(backend.requests).toHaveLength(3);
      // Jitter is fixed at the middle (factor 1): waits are 40 ms then 80 ms.
      const gap1 = backend.requests[1]!.receivedAt.getTime() - backend.requests[0]!.receivedAt.getTime();
      const gap2 = backend.requests[2]!.receivedAt.getTime() - backend.requests[1]!.receivedAt.getTime();
      expect(gap1).toBeGreaterThanOrEqual(38);
      expect(gap2).toBeGreaterThanOrEqual(78);
      const text = await h.metrics.registry.metrics();
      expect(text).toContain(`svc_export_errors_total{signal="traces",code="${name}"} 2`);
      expect(text).toContain(`svc_export_requests_total{signal="traces"} 3`);
      await expectExactAccounting(h);
    });
  }

  test("RESOURCE_EXHAUSTED with RetryInfo is retried after the server's delay", async () => {
    const { backend, h } = await setup({ backoff: { initial: "5ms", max: "10ms" } });
    backend.script = [{ ok: false, code: GrpcStatus.RESOURCE_EXHAUSTED, message: "slow down", retryDelayMs: 250 }];
    h.pipeline.submit("traces", spans(2));
    await waitUntil(() => h.pipeline.accounting().traces.exported === 2, { what: "export after RetryInfo delay" });
    expect(backend.requests).toHaveLength(2);
    const gap = backend.requests[1]!.receivedAt.getTime() - backend.requests[0]!.receivedAt.getTime();
    expect(gap).toBeGreaterThanOrEqual(245);
    await expectExactAccounting(h);
  });

  test("RESOURCE_EXHAUSTED without RetryInfo is permanent: dropped and counted", async () => {
    const { backend, h } = await setup();
    backend.script = [{ ok: false, code: GrpcStatus.RESOURCE_EXHAUSTED, message: "quota" }];
    h.pipeline.submit("traces", spans(3));
    await waitUntil(() => h.pipeline.accounting().traces.dropped.permanent_error === 3, { what: "permanent drop" });
    expect(backend.requests).toHaveLength(1);
    await expectExactAccounting(h);
  });

  test("a permanent code (INVALID_ARGUMENT) drops the batch once, counted as permanent_error", async () => {
    const { backend, h } = await setup();
    backend.script = [{ ok: false, code: GrpcStatus.INVALID_ARGUMENT, message: "bad batch" }];
    h.pipeline.submit("metrics", [{ type: "gauge", name: "g", value: 1, timeUnixNano: 1n }, { type: "gauge", name: "g", value: 2, timeUnixNano: 2n }]);
    await waitUntil(() => h.pipeline.accounting().metrics.dropped.permanent_error === 2, { what: "permanent drop" });
    expect(backend.requests).toHaveLength(1);
    expect(h.component.view().last_error).toBe("INVALID_ARGUMENT: bad batch");
    // The backend answered: it is reachable, so readiness stays ok.
    expect(h.readiness()).toBe("ok");
    await expectExactAccounting(h);
  });

  test("partial success: rejected items are dropped as partial_success, the rest exported", async () => {
    const { backend, h } = await setup({ queues: { logs: { batch_size: 10 } } });
    backend.script = [{ ok: true, rejected: 3, message: "3 records too large" }];
    h.pipeline.submit("logs", Array.from({ length: 10 }, (_, i) => ({ observedTimeUnixNano: BigInt(i + 1), body: `line ${i}` })));
    await waitUntil(() => h.pipeline.accounting().logs.exported === 7, { what: "partial success" });
    expect(h.pipeline.accounting().logs.dropped.partial_success).toBe(3);
    expect(h.logs.filter((r) => r.msg === "backend accepted part of a batch")).toMatchObject([{ items: 10, rejected: 3, message: "3 records too large" }]);
    await expectExactAccounting(h);
  });

  test("a success carrying a message and nothing rejected (a warning, or an undecodable body) exports the whole batch and is not logged as a partial one", async () => {
    const { backend, h } = await setup({ queues: { logs: { batch_size: 10 } } });
    backend.script = [{ ok: true, rejected: 0, message: "slow down a little" }];
    h.pipeline.submit("logs", Array.from({ length: 10 }, (_, i) => ({ observedTimeUnixNano: BigInt(i + 1), body: `line ${i}` })));
    await waitUntil(() => h.pipeline.accounting().logs.exported === 10, { what: "the batch" });
    expect(h.logs.filter((r) => r.msg === "backend accepted part of a batch")).toEqual([]);
    expect(h.logs.filter((r) => r.msg === "backend accepted a batch with a message")).toMatchObject([{ signal: "logs", items: 10, message: "slow down a little" }]);
    await expectExactAccounting(h);
  });
});

describe("drops", () => {
  test("queue full: items beyond capacity are dropped as queue_full", async () => {
    const h = harness(testConfig({ queues: { traces: { capacity: 5, batch_size: 5 } } }));
    open.push(h);
    expect(h.pipeline.submit("traces", spans(8))).toBe(5);
    const acc = h.pipeline.accounting().traces;
    expect(acc).toMatchObject({ collected: 8, queued: 5, droppedTotal: 3 });
    expect(acc.dropped.queue_full).toBe(3);
    await expectExactAccounting(h);
  });

  test("mem_limit: items beyond the encoded-bytes limit are dropped as mem_limit", async () => {
    const h = harness(testConfig({ queues: { traces: { mem_limit: "1KiB" } } }));
    open.push(h);
    const accepted = h.pipeline.submit("traces", spans(40));
    const acc = h.pipeline.accounting().traces;
    expect(accepted).toBeGreaterThan(0);
    expect(accepted).toBeLessThan(40);
    expect(acc.queuedBytes).toBeLessThanOrEqual(1024);
    expect(acc.dropped.mem_limit).toBe(40 - accepted);
    await expectExactAccounting(h);
  });
});

describe("backend availability and readiness", () => {
  test("backend down then up: readiness fails with the reason, nothing within capacity is lost, ready again", async () => {
    const probe = await new TestBackend().start();
    const port = probe.port;
    await probe.stop();
    const h = harness(testConfig({ otlp: { endpoint: `127.0.0.1:${port}` }, queues: { traces: { batch_size: 10 } } }), { idleCheckIntervalMs: 50 });
    open.push(h);
    await h.start();
    await waitUntil(() => h.readiness() === "failed: connection refused", { what: "readiness to fail" });
    expect(h.status.readiness().ready).toBe(false);
    expect(h.component.view().connected).toBe(false);
    h.pipeline.submit("traces", spans(50));
    await waitUntil(() => h.pipeline.accounting().traces.inFlight > 0, { what: "batches retrying" });
    await expectExactAccounting(h);
    const backend = await new TestBackend({ listen: `127.0.0.1:${port}` }).start();
    open.push(backend);
    await waitUntil(() => h.pipeline.accounting().traces.exported === 50, { what: "all 50 exported", timeoutMs: 15_000 });
    await waitUntil(() => h.readiness() === "ok", { what: "ready again" });
    expect(backend.items()).toBe(50);
    expect(h.pipeline.accounting().traces.droppedTotal).toBe(0);
    expect(h.component.view().connected).toBe(true);
    await expectExactAccounting(h);
  });

  test("a backend that goes away while idle is noticed by the connectivity check", async () => {
    const backend = await new TestBackend().start();
    const h = harness(testConfig({ otlp: { endpoint: backend.endpoint } }), { idleCheckIntervalMs: 50 });
    open.push(h);
    await h.start();
    await waitUntil(() => h.readiness() === "ok", { what: "ready" });
    backend.receiver.kill();
    await waitUntil(() => h.readiness().startsWith("failed: "), { what: "not ready after the backend left" });
  });

  test("unauthenticated is reported as such", async () => {
    const { backend, h } = await setup();
    backend.then = { ok: false, code: GrpcStatus.UNAUTHENTICATED, message: "bad api key" };
    h.pipeline.submit("traces", spans(1));
    await waitUntil(() => h.readiness() === "failed: unauthenticated", { what: "unauthenticated readiness" });
    expect(h.component.view().last_error).toBe("UNAUTHENTICATED: bad api key");
    await waitUntil(() => h.pipeline.accounting().traces.dropped.permanent_error === 1, { what: "drop" });
    await expectExactAccounting(h);
  });
});

describe("flush and shutdown", () => {
  test("flush drains every queue and reports the counts per signal", async () => {
    const { backend, h } = await setup({
      queues: { traces: { batch_timeout: "1h" }, metrics: { batch_timeout: "1h" }, logs: { batch_timeout: "1h" } },
    });
    h.pipeline.submit("traces", spans(7));
    h.pipeline.submit("metrics", [{ type: "sum", name: "c", value: 3, integer: true, temporality: 2, monotonic: true, timeUnixNano: 1n }]);
    h.pipeline.submit("logs", [{ observedTimeUnixNano: 1n, body: "x" }, { observedTimeUnixNano: 2n, body: "y" }]);
    expect(backend.requests).toHaveLength(0);
    expect(await h.pipeline.flush(5000)).toEqual({
      exported: { traces: 7, metrics: 1, logs: 2, profiles: 0 },
      dropped: { traces: 0, metrics: 0, logs: 0, profiles: 0 },
      remaining: { traces: 0, metrics: 0, logs: 0, profiles: 0 },
    });
    expect(backend.items("traces")).toBe(7);
    expect(backend.items("metrics")).toBe(1);
    expect(backend.items("logs")).toBe(2);
    await expectExactAccounting(h);
  });

  test("flush while the backend is down: every item is tried, and the answer says what remains and why", async () => {
    const probe = await new TestBackend().start();
    await probe.stop();
    const h = harness(testConfig({ otlp: { endpoint: probe.endpoint }, backoff: { initial: "30s", max: "30s" }, queues: { traces: { batch_size: 5 } } }));
    open.push(h);
    await h.start();
    h.pipeline.submit("traces", spans(12));
    const r = await h.pipeline.flush(60_000);
    expect(r.exported).toEqual({ traces: 0, metrics: 0, logs: 0, profiles: 0 });
    expect(r.remaining).toEqual({ traces: 12, metrics: 0, logs: 0, profiles: 0 });
    expect(r.reason).toBe("export_failed");
    expect(r.lastError).toStartWith("UNAVAILABLE: ");
    expect(h.pipeline.accounting().traces.inFlight + h.pipeline.accounting().traces.queued).toBe(12);
    await expectExactAccounting(h);
  });

  test("flush just after an outage cuts the backoff short and exports everything waiting", async () => {
    const port = closedLoopbackPort();
    const h = harness(testConfig({ otlp: { endpoint: `127.0.0.1:${port}` }, backoff: { initial: "30s", max: "30s" }, queues: { traces: { batch_size: 5 }, logs: { batch_size: 5 } } }));
    open.push(h);
    await h.start();
    h.pipeline.submit("traces", spans(12));
    h.pipeline.submit("logs", [{ observedTimeUnixNano: 1n, body: "x" }]);
    // Every batch failed once and waits 30 s for its next attempt.
    await waitUntil(() => h.pipeline.accounting().traces.inFlight === 12 && h.pipeline.accounting().logs.inFlight === 1, { what: "batches queued" });
    await waitUntil(async () => (await h.metrics.exportErrors.get()).values.reduce((a, v) => a + v.value, 0) >= 4, { what: "every batch in backoff" });
    const backend = await new TestBackend({ listen: `127.0.0.1:${port}` }).start();
    open.push(backend);
    const r = await h.pipeline.flush(20_000);
    expect(r).toEqual({
      exported: { traces: 12, metrics: 0, logs: 1, profiles: 0 },
      dropped: { traces: 0, metrics: 0, logs: 0, profiles: 0 },
      remaining: { traces: 0, metrics: 0, logs: 0, profiles: 0 },
    });
    expect(backend.items("traces")).toBe(12);
    await expectExactAccounting(h);
  });

  test("flush ends at its timeout while batches are still being sent, and says so", async () => {
    const slow = new OtlpReceiver({ listen: "127.0.0.1:0", respond: () => Bun.sleep(1000).then(() => ({ ok: true as const })) });
    const port = await slow.start();
    open.push(slow);
    const h = harness(testConfig({ otlp: { endpoint: `127.0.0.1:${port}`, timeout: "10s" } }));
    open.push(h);
    await h.start();
    h.pipeline.submit("traces", spans(3));
    const r = await h.pipeline.flush(200);
    expect(r.remaining.traces).toBe(3);
    expect(r.reason).toBe("timeout");
    await expectExactAccounting(h);
  });

  test("flush first pulls what flush sources hold (collector aggregates) into the queues", async () => {
    const { backend, h } = await setup({ queues: { metrics: { batch_timeout: "1h" } } });
    let pending = 2;
    const remove = h.pipeline.addFlushSource(() => {
      h.pipeline.submit("metrics", Array.from({ length: pending }, (_, i) => ({ type: "sum" as const, name: `c${i}`, value: 1, integer: true, temporality: 2, monotonic: true, timeUnixNano: 1n })));
      pending = 0;
    });
    expect((await h.pipeline.flush(5000)).exported.metrics).toBe(2);
    expect(backend.items("metrics")).toBe(2);
    remove();
    pending = 5;
    expect((await h.pipeline.flush(5000)).exported.metrics).toBe(0);
    await expectExactAccounting(h);
  });

  test("shutdown after an outage: batches waiting in backoff get one last attempt and are exported", async () => {
    const port = closedLoopbackPort();
    const h = harness(testConfig({ otlp: { endpoint: `127.0.0.1:${port}` }, backoff: { initial: "30s", max: "30s" }, queues: { traces: { batch_size: 5 } } }));
    open.push(h);
    await h.start();
    h.pipeline.submit("traces", spans(12));
    await waitUntil(async () => h.pipeline.accounting().traces.inFlight === 12 && (await h.metrics.exportErrors.get()).values.reduce((a, v) => a + v.value, 0) >= 3, { what: "three batches in backoff" });
    const backend = await new TestBackend({ listen: `127.0.0.1:${port}` }).start();
    open.push(backend);
    await h.stop(10_000);
    expect(backend.items("traces")).toBe(12);
    expect(h.pipeline.accounting().traces).toMatchObject({ collected: 12, exported: 12, queued: 0, inFlight: 0, droppedTotal: 0 });
    await expectExactAccounting(h);
  });

  test("shutdown drains the queues within the deadline", async () => {
    const { backend, h } = await setup({ queues: { traces: { batch_size: 10, batch_timeout: "1h" } } });
    h.pipeline.submit("traces", spans(35));
    await h.stop(5000);
    expect(backend.items()).toBe(35);
    expect(h.pipeline.accounting().traces).toMatchObject({ exported: 35, queued: 0, inFlight: 0, droppedTotal: 0 });
    expect(h.pipeline.submit("traces", spans(2))).toBe(0);
    expect(h.pipeline.accounting().traces.dropped.shutdown).toBe(2);
    await expectExactAccounting(h);
  });

  test("shutdown stops retrying and counts what could not be sent as shutdown", async () => {
    const probe = await new TestBackend().start();
    await probe.stop();
    const h = harness(testConfig({ otlp: { endpoint: probe.endpoint }, backoff: { initial: "5s", max: "10s" }, queues: { traces: { batch_size: 5 } } }));
    open.push(h);
    await h.start();
    h.pipeline.submit("traces", spans(12));
    await waitUntil(() => h.pipeline.accounting().traces.inFlight > 0, { what: "retrying" });
    const started = Date.now();
    await h.stop(3000);
    expect(Date.now() - started).toBeLessThan(3000);
    expect(h.pipeline.accounting().traces).toMatchObject({ collected: 12, exported: 0, queued: 0, inFlight: 0 });
    expect(h.pipeline.accounting().traces.dropped.shutdown).toBe(12);
    await expectExactAccounting(h);
  });
});
