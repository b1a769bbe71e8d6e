/**
 * The two sides the export benchmarks (bench/export.ts, bench/scaling-export.ts) compare, with the same spans:
 * svc-agent's pipeline (submit -> queue -> batcher -> retry -> timeout -> gRPC transport) and the OpenTelemetry
 * JS SDK (BatchSpanProcessor + OTLPTraceExporter gRPC). Spans are built before the clock starts (the SDK's ended
 * spans come from its own tracer: an HTTP server span with five attributes); the clock and the process CPU time
 * (user + system, every thread) run from the first span handed over to the last one acknowledged.
 */
import { SpanKind as OtelSpanKind, SpanStatusCode } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-grpc";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, BatchSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { loadConfig } from "../../src/config/load";
import { transportFor } from "../../src/export/transport-select";
import { SpanKind, StatusCode, type SpanItem } from "../../src/export/model";
import { OtlpPipeline } from "../../src/export/pipeline";
import { TransportSender } from "../../src/export/sender";
import { Logger } from "../../src/log/logger";
import { AgentMetrics } from "../../src/telemetry/metrics";
import { TaskRegistry } from "../../src/telemetry/tasks";

const SUBMIT_CHUNK = 1_000;
const FLUSH_TIMEOUT_MS = 120_000;
const NS_PER_MS = 1_000_000n;

/** One side's run: spans acknowledged, wall seconds and process CPU seconds over them. */
export interface SideRun {
  spans: number;
  seconds: number;
  cpuSeconds: number;
}

export interface SideOptions {
  /** Spans per export request (queues.traces.batch_size; the SDK's maxExportBatchSize). */
  batch: number;
  compression: "gzip" | "none";
  /** The pipeline's gzip level (otlp.compression_level); undefined: the configuration's default. The SDK has none. */
  level?: number;
}

/** The attributes of span `i` (one varies, as a peer port would). */
export function spanAttributes(i: number) {
  return {
    "http.request.method": "GET",
    "url.path": "/api/orders",
    "http.response.status_code": 200,
    "server.address": "orders.internal",
    "network.peer.port": 40000 + (i % 1000),
  };
}

export function agentSpans(n: number): SpanItem[] {
  const start = BigInt(Date.now()) * NS_PER_MS;
  return Array.from({ length: n }, (_, i) => ({
    traceId: crypto.getRandomValues(new Uint8Array(16)),
    spanId: crypto.getRandomValues(new Uint8Array(8)),
    name: "GET /api/orders",
    kind: SpanKind.SERVER,
    startTimeUnixNano: start + BigInt(i) * 1000n,
    endTimeUnixNano: start + BigInt(i) * 1000n + 2_500_000n,
    attributes: spanAttributes(i),
    status: { code: StatusCode.OK },
  }));
}

export function sdkSpans(n: number): ReadableSpan[] {
  const collected: ReadableSpan[] = [];
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ "service.name": "svc-agent-bench" }),
    spanProcessors: [{ onStart() {}, onEnd: (s: ReadableSpan) => void collected.push(s), forceFlush: async () => {}, shutdown: async () => {} }],
  });
  const tracer = provider.getTracer("bench");
  for (let i = 0; i < n; i++) {
    const span = tracer.startSpan("GET /api/orders", { kind: OtelSpanKind.SERVER, attributes: spanAttributes(i) });
    span.setStatus({ code: SpanStatusCode.OK });
    span.end();
  }
  return collected;
}

async function measure(spans: number, fn: () => Promise<unknown>): Promise<SideRun> {
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  return { spans, seconds, cpuSeconds: (cpu.user + cpu.system) / 1e6 };
}

/** Exports `spans` through a fresh svc-agent pipeline to `endpoint` (host:port); throws unless all were exported. */
export async function runPipeline(endpoint: string, spans: SpanItem[], o: SideOptions): Promise<SideRun> {
  const base = loadConfig(undefined, {}).config;
  const config = {
    ...base,
    otlp: { ...base.otlp, endpoint, compression: o.compression, compression_level: o.level ?? base.otlp.compression_level },
    queues: { ...base.queues, traces: { ...base.queues.traces, capacity: Math.max(spans.length, o.batch), mem_limit: "2GiB", batch_size: o.batch } },
  };
  const pipeline = new OtlpPipeline({ config, metrics: new AgentMetrics("bench", new TaskRegistry()), logger: new Logger({ level: "error" }) });
  pipeline.connect(new TransportSender(transportFor(config)));
  await pipeline.flush(1000);
  const r = await measure(spans.length, async () => {
    for (let i = 0; i < spans.length; i += SUBMIT_CHUNK) pipeline.submit("traces", spans.slice(i, i + SUBMIT_CHUNK));
    await pipeline.flush(FLUSH_TIMEOUT_MS);
  });
  const acc = pipeline.accounting().traces;
  await pipeline.shutdown(AbortSignal.timeout(5000));
  if (acc.exported !== spans.length) throw new Error(`agent exported ${acc.exported} of ${spans.length} at batch ${o.batch} (dropped ${acc.droppedTotal})`);
  return r;
}

/** Exports `spans` through the SDK's BatchSpanProcessor and gRPC exporter to `endpoint`; throws unless all were exported. */
export async function runSdk(endpoint: string, spans: ReadableSpan[], o: SideOptions): Promise<SideRun> {
  const exporter = new OTLPTraceExporter({ url: `http://${endpoint}`, compression: o.compression as never });
  const bsp = new BatchSpanProcessor(exporter, { maxQueueSize: spans.length, maxExportBatchSize: o.batch, scheduledDelayMillis: 200, exportTimeoutMillis: 30_000 });
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
  // The processor exports one batch after another while a full batch is queued (forceFlush of a large queue
  // would start every batch at once and hit the exporter's concurrency limit), so wait for the last answer.
  const r = await measure(spans.length, async () => {
    for (const s of spans) bsp.onEnd(s);
    await done;
  });
  await bsp.shutdown();
  if (exported !== spans.length) throw new Error(`SDK exported ${exported} of ${spans.length} at batch ${o.batch}`);
  return r;
}
