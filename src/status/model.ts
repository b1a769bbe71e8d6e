/**
 * Schemas of the status views the subsystems publish and /status* serves, field for field as the
 * self-telemetry spec lists them. Types come from these schemas (`typeof X.static`).
 * Subsystems publish views with `StatusAggregator.provide(name, () => view)`; the HTTP routes
 * validate and document their answers with the same schemas.
 */
import { Type, type Static } from "@sinclair/typebox";

const Timestamp = (description: string) => Type.String({ format: "date-time", description });
const Count = (description: string) => Type.Integer({ minimum: 0, description });

export const EbpfProgramSchema = Type.Object({
  name: Type.String(),
  type: Type.String({ description: "kprobe, tracepoint, raw_tp, tp_btf, perf_event, uprobe, ..." }),
  attached: Type.Boolean(),
  id: Type.Integer({ description: "Kernel program id (0 when not loaded)." }),
  reason: Type.Optional(Type.String({ description: "Why the program is not attached." })),
});

export const EbpfMapSchema = Type.Object({
  name: Type.String(),
  type: Type.String({ description: "hash, array, ringbuf, percpu_array, ..." }),
  entries: Count("Current entries."),
  max_entries: Count("Capacity."),
});

export const TlsTargetSchema = Type.Object({
  path: Type.String({ description: "The library (or executable) path in the process's mount namespace." }),
  kind: Type.Union([Type.Literal("shared"), Type.Literal("static")], { description: "shared: a libssl; static: an executable with OpenSSL linked in." }),
  state: Type.Union([Type.Literal("attached"), Type.Literal("failed"), Type.Literal("not_traceable"), Type.Literal("limit")], {
    description: "attached: probes live; failed: SSL_read/SSL_write could not be probed; not_traceable: OpenSSL linked in without symbols; limit: over agent.ebpf.network.max_tls_libraries.",
  }),
  reason: Type.Optional(Type.String({ description: "Why the target is not attached." })),
  functions: Type.Array(Type.String(), { description: "Functions probed at entry and return." }),
  processes: Count("Processes mapping the file."),
  pids: Type.Array(Type.Integer(), { description: "Some of those processes (at most 32)." }),
});

/** `ebpf` view: GET /status/ebpf. */
export const EbpfViewSchema = Type.Object({
  enabled: Type.Boolean(),
  programs: Type.Array(EbpfProgramSchema),
  maps: Type.Array(EbpfMapSchema),
  ringbuf: Type.Object({
    size: Count("Bytes."),
    events_received: Count("Events read from every ring buffer."),
    events_lost: Count("Reservations that failed in the kernel."),
  }),
  tls: Type.Optional(Type.Array(TlsTargetSchema, { description: "TLS libraries probed (ebpf/tls), per file, with the processes using each; absent when TLS tracing is off." })),
});
export type EbpfView = Static<typeof EbpfViewSchema>;

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

export const DiscoveredServiceSchema = Type.Object({
  name: Type.String(),
  namespace: Type.String(),
  instances: Count("Ready instances."),
  ports: Type.Array(Type.Integer()),
});

/** `discovery` view: GET /status/discovery. */
export const DiscoveryViewSchema = Type.Object({
  kubernetes: Type.Object({
    enabled: Type.Boolean(),
    connected: Type.Boolean(),
    cluster: Type.String(),
    namespace: Type.String(),
    pods_watched: Count("Pods watched on this node."),
    services_watched: Count("Services watched."),
  }),
  docker: Type.Object({
    enabled: Type.Boolean(),
    connected: Type.Boolean(),
    containers: Count("Containers known."),
  }),
  cloud: Type.Object({
    provider: Type.String({ description: "aws, gcp, azure or none" }),
    region: Type.String(),
    instance_id: Type.String(),
  }),
  discovered_services: Type.Array(DiscoveredServiceSchema),
});
export type DiscoveryView = Static<typeof DiscoveryViewSchema>;

/** `profiling` view: the profiling fields of GET /status. */
export const ProfilingViewSchema = Type.Object({
  enabled: Type.Boolean(),
  sample_rate: Count("Samples per second."),
  profiles_collected: Count("Profiles collected."),
});
export type ProfilingView = Static<typeof ProfilingViewSchema>;

/**
 * What GET /status shows of the `ebpf`, `export` and `discovery` views. A subsystem publishes it next to its view
 * (`provide(name, view, summary)`) from counts it keeps, so /status copies no list; the figures are those of the
 * full view at the same instant.
 */
export interface EbpfSummary {
  enabled: boolean;
  /** Programs with a kernel id (> 0). */
  programs_loaded: number;
  /** Entries of the view's `maps`. */
  maps_created: number;
  /** The view's `ringbuf.size`. */
  ringbuf_size: number;
}

export interface ExportSummary {
  endpoint: string;
  connected: boolean;
  last_export: string | null;
  /** The view's `queues.traces.exported`. */
  spans_exported: number;
  /** The view's `queues.metrics.exported`. */
  metrics_exported: number;
}

export interface DiscoverySummary {
  /** kubernetes.enabled && kubernetes.connected */
  kubernetes: boolean;
  /** docker.enabled && docker.connected */
  docker: boolean;
  /** kubernetes.pods_watched */
  pods_discovered: number;
  /** docker.containers */
  containers_discovered: number;
}

/** The names under which subsystems publish their views. */
export const VIEWS = { ebpf: "ebpf", export: "export", discovery: "discovery", profiling: "profiling" } as const;
