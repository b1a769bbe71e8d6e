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
import { agentSpans, runPipeline, runSdk, sdkSpans, type SideRun } from "./lib/export-sides";
import { startReceiver } from "./lib/agent";
import type { BenchResultWithCurves } from "./lib/curves";
import { report, type BenchRow } from "./lib/report";
import { argNumber, argText } from "./lib/args";

const BATCHES = argText("batches", "64,256,1024,4096").split(",").map(Number);
const SPANS = argNumber("spans", 50_000);

interface Figures {
  spansPerSecond: number;
  cpuUsPerSpan: number;
}

const figures = (r: SideRun): Figures => ({ spansPerSecond: r.spans / r.seconds, cpuUsPerSpan: (r.cpuSeconds * 1e6) / r.spans });

const receiver = await startReceiver();
const agent: Figures[] = [];
const sdk: Figures[] = [];
try {
  // Warm-up of both paths (JIT, gRPC channel), not reported.
  await runPipeline(receiver.address, agentSpans(5_000), { batch: 512, compression: "gzip" });
  await runSdk(receiver.address, sdkSpans(5_000), { batch: 512, compression: "gzip" });
  for (const b of BATCHES) {
    agent.push(figures(await runPipeline(receiver.address, agentSpans(SPANS), { batch: b, compression: "gzip" })));
    sdk.push(figures(await runSdk(receiver.address, sdkSpans(SPANS), { batch: b, compression: "gzip" })));
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
