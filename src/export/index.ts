/**
 * OTLP export: everything the agent collects leaves through here, down a chain of senders the exporter
 * component builds and owns: per signal queue -> batch, then account -> retry -> measure -> timeout -> push over
 * the transport (OTLP/gRPC or OTLP/HTTP; gzip, TLS, headers); exact accounting per signal (the pipeline, the
 * chain's front), status view `export`, readiness `otlp`; and the `receive` command's OTLP receiver (receiver/).
 */
import type { BaseContext } from "../lifecycle/context";
import type { Component } from "../lifecycle/component";
import { OtlpExporterComponent } from "./component";
import type { TelemetryPipeline } from "./types";

export type { TelemetryPipeline, Attributes, AttributeValue, SignalAccounting, DropReason } from "./types";
export type * from "./model";
export { SpanKind, StatusCode, Temporality, Severity } from "./model";

export interface ExportSubsystem {
  pipeline: TelemetryPipeline;
  components: Component[];
}

/** Builds the component `exporter/otlp` and its chain (which connects at start); collectors submit to its pipeline. */
export function createExport(ctx: BaseContext): ExportSubsystem {
  const exporter = new OtlpExporterComponent(ctx);
  return { pipeline: exporter.pipeline, components: [exporter] };
}
