/**
 * The OTLP .proto definitions (proto/, embedded in the binary) loaded into one protobufjs Root at first use.
 * The exporter encodes with its own writer (encode.ts, field numbers checked against this schema by the unit
 * tests) and decodes responses, RetryInfo and, in the receiver, whole requests with these types.
 * protobufjs itself is loaded with the schema: an exporter whose backend answers empty messages (an OTLP/gRPC
 * success without partial_success) never evaluates it.
 */
import { readFileSync } from "node:fs";
import type protobuf from "protobufjs";
import anyProto from "../../proto/google/protobuf/any.proto" with { type: "file" };
import durationProto from "../../proto/google/protobuf/duration.proto" with { type: "file" };
import statusProto from "../../proto/google/rpc/status.proto" with { type: "file" };
import errorDetailsProto from "../../proto/google/rpc/error_details.proto" with { type: "file" };
import commonProto from "../../proto/opentelemetry/proto/common/v1/common.proto" with { type: "file" };
import resourceProto from "../../proto/opentelemetry/proto/resource/v1/resource.proto" with { type: "file" };
import traceProto from "../../proto/opentelemetry/proto/trace/v1/trace.proto" with { type: "file" };
import metricsProto from "../../proto/opentelemetry/proto/metrics/v1/metrics.proto" with { type: "file" };
import logsProto from "../../proto/opentelemetry/proto/logs/v1/logs.proto" with { type: "file" };
import profilesProto from "../../proto/opentelemetry/proto/profiles/v1development/profiles.proto" with { type: "file" };
import traceServiceProto from "../../proto/opentelemetry/proto/collector/trace/v1/trace_service.proto" with { type: "file" };
import metricsServiceProto from "../../proto/opentelemetry/proto/collector/metrics/v1/metrics_service.proto" with { type: "file" };
import logsServiceProto from "../../proto/opentelemetry/proto/collector/logs/v1/logs_service.proto" with { type: "file" };
import profilesServiceProto from "../../proto/opentelemetry/proto/collector/profiles/v1development/profiles_service.proto" with { type: "file" };
import type { Signal } from "./config";

/** Dependencies first: every file is parsed into the same Root, so imports resolve by full name. */
const PROTO_FILES: readonly string[] = [
  anyProto,
  durationProto,
  statusProto,
  errorDetailsProto,
  commonProto,
  resourceProto,
  traceProto,
  metricsProto,
  logsProto,
  profilesProto,
  traceServiceProto,
  metricsServiceProto,
  logsServiceProto,
  profilesServiceProto,
];

/** The gRPC service of each signal: method path and message type names. */
export const SERVICES: Record<Signal, { path: string; request: string; response: string; rejectedField: string }> = {
  traces: {
    path: "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    request: "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest",
    response: "opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse",
    rejectedField: "rejectedSpans",
  },
  metrics: {
    path: "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
    request: "opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest",
    response: "opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceResponse",
    rejectedField: "rejectedDataPoints",
  },
  logs: {
    path: "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
    request: "opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest",
    response: "opentelemetry.proto.collector.logs.v1.ExportLogsServiceResponse",
    rejectedField: "rejectedLogRecords",
  },
  profiles: {
    path: "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export",
    request: "opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest",
    response: "opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceResponse",
    rejectedField: "rejectedProfiles",
  },
};

let root: protobuf.Root | undefined;

/** The loaded schema (parsed once, on first use; safe to call from anywhere). */
export function otlpRoot(): protobuf.Root {
  if (root) return root;
  const pb = require("protobufjs") as typeof protobuf;
  const r = new pb.Root();
  for (const path of PROTO_FILES) pb.parse(readFileSync(path, "utf8"), r, { keepCase: false });
  r.resolveAll();
  root = r;
  return r;
}

/** A message type of the schema by its full name (throws when absent: a programming error). */
export function otlpType(fullName: string): protobuf.Type {
  return otlpRoot().lookupType(fullName);
}
