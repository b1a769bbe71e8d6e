/**
 * Export throughput vs batch size: the same spans, gzip, OTLP/gRPC to one `svc-agent receive` (dist binary,
 * a separate process), through svc-agent's pipeline (queue -> batcher -> retry -> gRPC transport) with
 * `queues.traces.batch_size` = B, and through the OpenTelemetry JS SDK (BatchSpanProcessor +
 * OTLPTraceExporter gRPC) with maxExportBatchSize = B, measured in the same run at each B. Figures: spans/s
 * (first span handed over to the last acknowledged) and process CPU microseconds per span. Span content is the
 * same as bench/export.ts (an HTTP server span with five attributes).
 *
 * Usage: bun bench/scaling-export.ts [--batches 64,256,1024,4096] [--spans 50000]
 */
import { BasicTracerProvider, BatchSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-grpc";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { SpanKind as OtelSpanKind, SpanStatusCode } from "@opentelemetry/api";
import { loadConfig } from "../src/config/load";
import { grpcTransportFor } from "../src/export/component";
import { SpanKind, StatusCode, type SpanItem } from "../src/export/model";
import { OtlpPipeline } from "../src/export/pipeline";
import { Logger } from "../src/log/logger";
import { AgentMetrics } from "../src/telemetry/metrics";
import { TaskRegistry } from "../src/telemetry/tasks";
import { startReceiver } from "./lib/agent";
import { argValue, type BenchResultWithCurves } from "./lib/curves";
import { report, type BenchRow } from "./lib/report";

const BATCHES = argValue("batches", "64,256,1024,4096").split(",").map(Number);
const SPANS = Number(argValue("spans", "50000"));
const SUBMIT_CHUNK = 1_000;
const FLUSH_TIMEOUT_MS = 120_000;
const NS_PER_MS = 1_000_000n;
const ATTRS = (i: number) => ({
  "http.request.method": "GET",
  "url.path": "/api/orders",
  "http.response.status_code": 200,
  "server.address": "orders.internal",
  "network.peer.port": 40000 + (i % 1000),
});

interface Figures {
  spansPerSecond: number;
  cpuUsPerSpan: number;
}

async function measure(n: number, fn: () => Promise<void>): Promise<Figures> {
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  return { spansPerSecond: n / seconds, cpuUsPerSpan: (cpu.user + cpu.system) / n };
}

function agentSpans(n: number): SpanItem[] {
  const start = BigInt(Date.now()) * NS_PER_MS;
  return Array.from({ length: n }, (_, i) => ({
    traceId: crypto.getRandomValues(new Uint8Array(16)),
    spanId: crypto.getRandomValues(new Uint8Array(8)),
    name: "GET /api/orders",
    kind: SpanKind.SERVER,
    startTimeUnixNano: start + BigInt(i) * 1000n,
    endTimeUnixNano: start + BigInt(i) * 1000n + 2_500_000n,
    attributes: ATTRS(i),
    status: { code: StatusCode.OK },
  }));
}

function sdkSpans(n: number): ReadableSpan[] {
  const collected: ReadableSpan[] = [];
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ "service.name": "svc-agent-bench" }),
    spanProcessors: [{ onStart() {}, onEnd: (s: ReadableSpan) => void collected.push(s), forceFlush: async () => {}, shutdown: async () => {} }],
  });
  const tracer = provider.getTracer("bench");
  for (let i = 0; i < n; i++) {
    const span = tracer.startSpan("GET /api/orders", { kind: OtelSpanKind.SERVER, attributes: ATTRS(i) });
    span.setStatus({ code: SpanStatusCode.OK });
    span.end();
  }
  return collected;
}

async function runAgent(endpoint: string, batch: number, spans: SpanItem[]): Promise<Figures> {
  const base = loadConfig(undefined, {}).config;
  const config = {
    ...base,
    otlp: { ...base.otlp, endpoint, compression: "gzip" as const },
    queues: { ...base.queues, traces: { ...base.queues.traces, capacity: Math.max(spans.length, batch), mem_limit: "2GiB", batch_size: batch } },
  };
  const pipeline = new OtlpPipeline({ config, metrics: new AgentMetrics("bench", new TaskRegistry()), logger: new Logger({ level: "error" }) });
  pipeline.setTransport(grpcTransportFor(config));
  await pipeline.flush(1000);
  const f = await measure(spans.length, async () => {
    for (let i = 0; i < spans.length; i += SUBMIT_CHUNK) pipeline.submit("traces", spans.slice(i, i + SUBMIT_CHUNK));
    await pipeline.flush(FLUSH_TIMEOUT_MS);
  });
  const acc = pipeline.accounting().traces;
  await pipeline.shutdown(AbortSignal.timeout(5000));
  if (acc.exported !== spans.length) throw new Error(`agent exported ${acc.exported} of ${spans.length} at batch ${batch}`);
  return f;
}

async function runSdk(endpoint: string, batch: number, spans: ReadableSpan[]): Promise<Figures> {
  const exporter = new OTLPTraceExporter({ url: `http://${endpoint}`, compression: "gzip" as never });
  const bsp = new BatchSpanProcessor(exporter, { maxQueueSize: spans.length, maxExportBatchSize: batch, scheduledDelayMillis: 200, exportTimeoutMillis: 30_000 });
  let exported = 0;
  let failed = 0;
  let allDone: () => void = () => {};
  const done = new Promise<void>((r) => (allDone = r));
  const original = exporter.export.bind(exporter);
  exporter.export = (b, callback) =>
    original(b, (result) => {
      if (result.code === 0) exported += b.length;
      else failed += b.length;
      if (exported + failed >= spans.length) allDone();
      callback(result);
    });
  const f = await measure(spans.length, async () => {
    for (const s of spans) bsp.onEnd(s);
    await done;
  });
  await bsp.shutdown();
  if (exported !== spans.length) throw new Error(`SDK exported ${exported} of ${spans.length} at batch ${batch}`);
  return f;
}

const receiver = await startReceiver();
const agent: Figures[] = [];
const sdk: Figures[] = [];
try {
  // Warm-up of both paths (JIT, gRPC channel), not reported.
  await runAgent(receiver.address, 512, agentSpans(5_000));
  await runSdk(receiver.address, 512, sdkSpans(5_000));
  for (const b of BATCHES) {
    agent.push(await runAgent(receiver.address, b, agentSpans(SPANS)));
    sdk.push(await runSdk(receiver.address, b, sdkSpans(SPANS)));
    console.log(`batch ${b}: svc-agent ${agent.at(-1)!.spansPerSecond.toFixed(0)} spans/s ${agent.at(-1)!.cpuUsPerSpan.toFixed(2)} us CPU/span; OTel SDK ${sdk.at(-1)!.spansPerSecond.toFixed(0)} spans/s ${sdk.at(-1)!.cpuUsPerSpan.toFixed(2)} us CPU/span`);
  }
} finally {
  await receiver.stop();
}

const rows: BenchRow[] = BATCHES.map((b, i) => ({
  name: `spans exported, batch ${b}`,
  agent: agent[i]!.spansPerSecond,
  reference: sdk[i]!.spansPerSecond,
  referenceName: `OTel JS SDK BSP+gRPC, maxExportBatchSize ${b}`,
  unit: "spans/s",
}));
const result: BenchResultWithCurves = {
  bench: "scaling-export: export throughput vs batch size (OTLP/gRPC, gzip, loopback receiver)",
  rows,
  curves: [
    {
      id: "scaling-export",
      title: "Export throughput vs batch size",
      xLabel: "batch size (spans)",
      yLabel: "spans/s",
      unit: "spans/s",
      x: BATCHES,
      xLog: true,
      series: [
        { name: "svc-agent pipeline", y: agent.map((f) => f.spansPerSecond) },
        { name: "OTel JS SDK BSP + gRPC exporter", y: sdk.map((f) => f.spansPerSecond) },
      ],
    },
    {
      id: "scaling-export-cpu",
      title: "Export CPU per span vs batch size",
      xLabel: "batch size (spans)",
      yLabel: "us CPU per span",
      unit: "us CPU/span",
      x: BATCHES,
      xLog: true,
      series: [
        { name: "svc-agent pipeline", y: agent.map((f) => f.cpuUsPerSpan) },
        { name: "OTel JS SDK BSP + gRPC exporter", y: sdk.map((f) => f.cpuUsPerSpan) },
      ],
    },
  ],
  notes: [`${SPANS} spans per point, built before the clock starts; CPU is this process's (user+system); receiver is dist/svc-agent receive in its own process`],
};
report(result);
