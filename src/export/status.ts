/** The `export` status view (GET /status/export) and its fields of GET /status. */
import { Type, type Static } from "@sinclair/typebox";
import type { Config } from "../config/schema";
import { Count, Timestamp, type StatusSection } from "../status/model";
import { signalTarget } from "./config";

export const QueueViewSchema = Type.Object({
  size: Count("Current items."),
  capacity: Count("Maximum items."),
  exported: Count("Items exported."),
  dropped: Count("Items dropped."),
});

/** `export` view: GET /status/export. */
export const ExportViewSchema = Type.Object({
  endpoint: Type.String({ description: "otlp.endpoint: host:port or a URL" }),
  protocol: Type.String({ description: "grpc or http/protobuf (otlp.protocol)" }),
  tls: Type.Boolean(),
  compression: Type.String({ description: "gzip or none" }),
  connected: Type.Boolean(),
  last_export: Type.Union([Timestamp("Last successful export."), Type.Null()]),
  last_error: Type.Union([Type.String(), Type.Null()], { description: "null when no error; else code and message." }),
  queues: Type.Object({ traces: QueueViewSchema, metrics: QueueViewSchema, logs: QueueViewSchema }),
});
export type ExportView = Static<typeof ExportViewSchema>;

/** What GET /status shows of the view; the exporter publishes it next to the view. */
export const ExportSummarySchema = Type.Object({
  endpoint: Type.String(),
  connected: Type.Boolean(),
  last_export: Type.Union([Type.String({ format: "date-time" }), Type.Null()], { description: "null before the first successful export." }),
  // The view's `queues.traces.exported`.
  spans_exported: Type.Integer({ minimum: 0 }),
  // The view's `queues.metrics.exported`.
  metrics_exported: Type.Integer({ minimum: 0 }),
});
export type ExportSummary = Static<typeof ExportSummarySchema>;

export const EXPORT_STATUS: StatusSection<ExportView, ExportSummary, Config> = {
  name: "export",
  disabled: (c) => {
    const q = (k: "traces" | "metrics" | "logs") => ({ size: 0, capacity: c.queues[k].capacity, exported: 0, dropped: 0 });
    return {
      endpoint: c.otlp.endpoint,
      protocol: c.otlp.protocol,
      tls: !signalTarget(c.otlp, "traces").insecure,
      compression: c.otlp.compression,
      connected: false,
      last_export: null,
      last_error: "export pipeline not running",
      queues: { traces: q("traces"), metrics: q("metrics"), logs: q("logs") },
    };
  },
  summary: (v) => ({ endpoint: v.endpoint, connected: v.connected, last_export: v.last_export, spans_exported: v.queues.traces.exported, metrics_exported: v.queues.metrics.exported }),
};
