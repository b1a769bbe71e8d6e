/**
 * The items collectors submit to the pipeline (`TelemetryPipeline.submit(signal, items)`), as plain objects
 * close to OTLP. One item is one span (`traces`), one metric data point (`metrics`), one log record (`logs`)
 * or one profile (`profiles`): queues, drops and accounting count these units.
 *
 * Conventions: times are nanoseconds since the Unix epoch as `bigint` (OTLP fixed64); ids are raw bytes
 * (trace id 16 bytes, span id 8 bytes); attributes are `Attributes` (integers that are safe integers are
 * sent as int_value, other numbers as double_value). Every item may name its instrumentation `scope`
 * (default: the agent itself) and the `resource` of the workload it is about (src/workloads; it replaces the
 * agent's own service.name and telemetry.sdk.*, keeping the host attributes); items with equal scope and
 * resource are sent together.
 */
import type { Attributes } from "./types";
import type { ProtoWriter } from "./wire";

/** The component that produced an item (OTLP InstrumentationScope). */
export interface Scope {
  name: string;
  version?: string;
}

/** What every item may carry besides its own fields. */
export interface ItemOrigin {
  /** Producer of the item; defaults to `{ name: "svc-agent" }`. Reuse one object per producer (it is cached by identity). */
  scope?: Scope;
  /** The workload the item is about (absent: the agent itself); reuse one object per workload (cached by identity). */
  resource?: Attributes;
}

/** OTLP Span.SpanKind. */
export const SpanKind = { UNSPECIFIED: 0, INTERNAL: 1, SERVER: 2, CLIENT: 3, PRODUCER: 4, CONSUMER: 5 } as const;
export type SpanKindValue = (typeof SpanKind)[keyof typeof SpanKind];

/** OTLP Status.StatusCode. */
export const StatusCode = { UNSET: 0, OK: 1, ERROR: 2 } as const;
export type StatusCodeValue = (typeof StatusCode)[keyof typeof StatusCode];

export interface SpanEvent {
  timeUnixNano: bigint;
  name: string;
  attributes?: Attributes;
}

export interface SpanLink {
  traceId: Uint8Array;
  spanId: Uint8Array;
  traceState?: string;
  attributes?: Attributes;
}

/** One span (OTLP trace.v1.Span). */
export interface SpanItem extends ItemOrigin {
  /** 16 bytes. */
  traceId: Uint8Array;
  /** 8 bytes. */
  spanId: Uint8Array;
  /** 8 bytes; absent for a root span. */
  parentSpanId?: Uint8Array;
  traceState?: string;
  /** W3C trace flags in the low 8 bits (OTLP SpanFlags). */
  flags?: number;
  name: string;
  kind: SpanKindValue;
  startTimeUnixNano: bigint;
  endTimeUnixNano: bigint;
  attributes?: Attributes;
  /**
   * Writes the span's attributes as KeyValue fields `field` straight from what they are made of, without building
   * `attributes`: exactly the bytes writeAttributes (export/encode.ts) writes for `attributes` (HTTP spans,
   * src/collectors/network/http/spans.ts). The encoder calls it instead of encoding `attributes` when present.
   */
  writeAttributes?(w: ProtoWriter, field: number): void;
  events?: SpanEvent[];
  links?: SpanLink[];
  status?: { code: StatusCodeValue; message?: string };
}

/** OTLP AggregationTemporality. */
export const Temporality = { UNSPECIFIED: 0, DELTA: 1, CUMULATIVE: 2 } as const;
export type TemporalityValue = (typeof Temporality)[keyof typeof Temporality];

/** The metric a data point belongs to (OTLP Metric without its points). Points with equal fields are sent under one Metric. */
interface MetricIdentity extends ItemOrigin {
  name: string;
  description?: string;
  unit?: string;
  attributes?: Attributes;
  startTimeUnixNano?: bigint;
  timeUnixNano: bigint;
}

/** A gauge point (OTLP Gauge / NumberDataPoint). `value` is sent as as_int when `integer` is true, else as_double. */
export interface GaugePointItem extends MetricIdentity {
  type: "gauge";
  value: number;
  integer?: boolean;
}

/** A sum point (OTLP Sum / NumberDataPoint). */
export interface SumPointItem extends MetricIdentity {
  type: "sum";
  value: number;
  integer?: boolean;
  temporality: TemporalityValue;
  monotonic: boolean;
}

/** A measurement of a sampled span attached to a point (OTLP Exemplar). */
export interface Exemplar {
  timeUnixNano: bigint;
  value: number;
  traceId?: Uint8Array;
  spanId?: Uint8Array;
}

/** A histogram point (OTLP Histogram / HistogramDataPoint): `bucketCounts.length` is `explicitBounds.length + 1`. */
export interface HistogramPointItem extends MetricIdentity {
  type: "histogram";
  temporality: TemporalityValue;
  count: number;
  sum?: number;
  min?: number;
  max?: number;
  bucketCounts: number[];
  explicitBounds: number[];
  exemplars?: Exemplar[];
}

/** One metric data point. */
export type MetricPointItem = GaugePointItem | SumPointItem | HistogramPointItem;

/** OTLP SeverityNumber ranges: TRACE 1-4, DEBUG 5-8, INFO 9-12, WARN 13-16, ERROR 17-20, FATAL 21-24. */
export const Severity = { UNSPECIFIED: 0, TRACE: 1, DEBUG: 5, INFO: 9, WARN: 13, ERROR: 17, FATAL: 21 } as const;

/** One log record (OTLP logs.v1.LogRecord). */
export interface LogRecordItem extends ItemOrigin {
  timeUnixNano?: bigint;
  /** When the agent saw the record. */
  observedTimeUnixNano: bigint;
  /** 1..24 (see Severity); 0 when unknown. */
  severityNumber?: number;
  severityText?: string;
  /** The message (a string, or structured as an AttributeValue). */
  body?: string | number | boolean | string[] | number[];
  attributes?: Attributes;
  traceId?: Uint8Array;
  spanId?: Uint8Array;
  flags?: number;
  eventName?: string;
}

/** One stack frame of a profile sample. */
export interface ProfileFrame {
  function: string;
  file?: string;
  line?: number;
  /** Instruction address (for unsymbolised frames). */
  address?: bigint;
  /** The binary or library the frame is in. */
  binary?: string;
  /** The GNU build id of `binary` (hex), when it has one (sent as the mapping's process.executable.build_id.gnu). */
  buildId?: string;
}

export interface ProfileSample {
  /** Leaf first. */
  stack: ProfileFrame[];
  /** One value per sample, of `sampleType`. */
  value: number;
  attributes?: Attributes;
}

/**
 * One profile (OTLP profiles.v1development.Profile). The pipeline builds the shared dictionary (strings,
 * functions, locations, mappings) of every request from the frames.
 */
export interface ProfileItem extends ItemOrigin {
  /** e.g. `{ type: "samples", unit: "count" }` or `{ type: "cpu", unit: "nanoseconds" }`. */
  sampleType: { type: string; unit: string };
  /** e.g. `{ type: "cpu", unit: "nanoseconds" }` with `period` ns between samples. */
  periodType?: { type: string; unit: string };
  period?: number;
  timeUnixNano: bigint;
  durationNanos: bigint;
  samples: ProfileSample[];
  attributes?: Attributes;
  /** 16 bytes, optional. */
  profileId?: Uint8Array;
}

/** The item type of each signal. */
export interface SignalItems {
  traces: SpanItem;
  metrics: MetricPointItem;
  logs: LogRecordItem;
  profiles: ProfileItem;
}
