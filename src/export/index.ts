/**
 * OTLP export: everything the agent collects leaves through here, down a chain of senders. Per signal a queue
 * and a batcher (the pipeline), then retry -> measure -> timeout -> the exporter component's push over the
 * transport (OTLP/gRPC or OTLP/HTTP; gzip, TLS, headers), exact accounting per signal, status view `export`,
 * readiness `otlp`; and the `receive` command's OTLP receiver (receiver/).
 */
import type { BaseContext } from "../lifecycle/context";
import type { Component } from "../lifecycle/component";
import { OtlpExporterComponent } from "./component";
import { OtlpPipeline } from "./pipeline";
import type { TelemetryPipeline } from "./types";

export type { TelemetryPipeline, Attributes, AttributeValue, SignalAccounting, DropReason } from "./types";
export type * from "./model";
export { SpanKind, StatusCode, Temporality, Severity } from "./model";

export interface ExportSubsystem {
  pipeline: TelemetryPipeline;
  components: Component[];
}

/** Builds the pipeline and its component `exporter/otlp` (which connects at start). */
export function createExport(ctx: BaseContext): ExportSubsystem {
  const pipeline = new OtlpPipeline({ config: ctx.config, metrics: ctx.metrics, logger: ctx.logger, tasks: ctx.tasks, gate: ctx.memory });
  return { pipeline, components: [new OtlpExporterComponent(ctx, pipeline)] };
}
