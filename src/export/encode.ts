/**
 * OTLP protobuf encoding of the items (model.ts) and of export requests. Each item is encoded once, when it
 * is submitted (its size is what `mem_limit` counts); a request is assembled from the encoded items,
 * grouped by resource and scope (and, for metrics, by metric). Field numbers are those of proto/ (the unit
 * tests check every constant here against the loaded schema).
 */
import type { Signal } from "./config";
import type { LogRecordItem, MetricPointItem, ProfileItem, Scope, SpanItem } from "./model";
import type { AttributeValue, Attributes } from "./types";
import { ProtoWriter, WIRE, allocate } from "./wire";

/** Field numbers, by message (see proto/opentelemetry/proto). */
export const F = {
  AnyValue: { string_value: 1, bool_value: 2, int_value: 3, double_value: 4, array_value: 5, kvlist_value: 6, bytes_value: 7 },
  ArrayValue: { values: 1 },
  KeyValue: { key: 1, value: 2 },
  InstrumentationScope: { name: 1, version: 2, attributes: 3 },
  Resource: { attributes: 1 },
  ExportTraceServiceRequest: { resource_spans: 1 },
  ResourceSpans: { resource: 1, scope_spans: 2 },
  ScopeSpans: { scope: 1, spans: 2 },
  Span: {
    trace_id: 1, span_id: 2, trace_state: 3, parent_span_id: 4, name: 5, kind: 6, start_time_unix_nano: 7,
    end_time_unix_nano: 8, attributes: 9, events: 11, links: 13, status: 15, flags: 16,
  },
  Event: { time_unix_nano: 1, name: 2, attributes: 3 },
  Link: { trace_id: 1, span_id: 2, trace_state: 3, attributes: 4 },
  Status: { message: 2, code: 3 },
  ExportMetricsServiceRequest: { resource_metrics: 1 },
  ResourceMetrics: { resource: 1, scope_metrics: 2 },
  ScopeMetrics: { scope: 1, metrics: 2 },
  Metric: { name: 1, description: 2, unit: 3, gauge: 5, sum: 7, histogram: 9 },
  Gauge: { data_points: 1 },
  Sum: { data_points: 1, aggregation_temporality: 2, is_monotonic: 3 },
  Histogram: { data_points: 1, aggregation_temporality: 2 },
  NumberDataPoint: { attributes: 7, start_time_unix_nano: 2, time_unix_nano: 3, as_double: 4, as_int: 6 },
  HistogramDataPoint: {
    attributes: 9, start_time_unix_nano: 2, time_unix_nano: 3, count: 4, sum: 5, bucket_counts: 6, explicit_bounds: 7, exemplars: 8, min: 11, max: 12,
  },
  Exemplar: { time_unix_nano: 2, as_double: 3, span_id: 4, trace_id: 5 },
  ExportLogsServiceRequest: { resource_logs: 1 },
  ResourceLogs: { resource: 1, scope_logs: 2 },
  ScopeLogs: { scope: 1, log_records: 2 },
  LogRecord: {
    time_unix_nano: 1, observed_time_unix_nano: 11, severity_number: 2, severity_text: 3, body: 5, attributes: 6, flags: 8,
    trace_id: 9, span_id: 10, event_name: 12,
  },
  ExportProfilesServiceRequest: { resource_profiles: 1, dictionary: 2 },
  ResourceProfiles: { resource: 1, scope_profiles: 2 },
  ScopeProfiles: { scope: 1, profiles: 2 },
  ProfilesDictionary: {
    mapping_table: 1, location_table: 2, function_table: 3, link_table: 4, string_table: 5, attribute_table: 6, stack_table: 7,
  },
  Profile: { sample_type: 1, samples: 2, time_unix_nano: 3, duration_nano: 4, period_type: 5, period: 6, profile_id: 7, attribute_indices: 11 },
  ValueType: { type_strindex: 1, unit_strindex: 2 },
  Sample: { stack_index: 1, attribute_indices: 2, link_index: 3, values: 4 },
  Stack: { location_indices: 1 },
  Mapping: { filename_strindex: 4, attribute_indices: 5 },
  Location: { mapping_index: 1, address: 2, lines: 3 },
  Line: { function_index: 1, line: 2 },
  Function: { name_strindex: 1, system_name_strindex: 2, filename_strindex: 3 },
  ProfilesLink: { trace_id: 1, span_id: 2 },
  KeyValueAndUnit: { key_strindex: 1, value: 2, unit_strindex: 3 },
} as const;

/** Size of the arenas encoded items are kept in. */
const ARENA_BYTES = 256 * 1024;

interface Arena {
  signal: Signal;
  buf: Uint8Array;
  used: number;
  /** Items written into it and not yet released (ItemEncoder.release). */
  live: number;
  /** No longer written into: written again once `live` is 0 (the signal's spare). */
  retired: boolean;
}

/** The scope of items that name none. */
export const DEFAULT_SCOPE: Scope = { name: "svc-agent" };

/** One queued item: its encoded body, the grouping keys, and (profiles) the item itself. */
export interface EncodedItem {
  /** The encoded message body (Span, data point, LogRecord; for a profile, a standalone request, for its size). */
  bytes: Uint8Array;
  scope: Scope | undefined;
  resource: Attributes | undefined;
  /** Metrics: the Metric the point belongs to. */
  metric?: MetricPointItem;
  /** Metrics: key of the Metric (type, name, unit, description, temporality, monotonic). */
  metricKey?: string;
  /**
   * Profiles: the item. A profile is encoded once, when its batch is sent, with the dictionary the whole request
   * shares (`bytes` stays empty; encoding it alone at submit as well would write every profile twice).
   */
  profile?: ProfileItem;
  /** Bytes the item counts for in queue limits when `bytes` is not its encoding (profiles: estimateProfileBytes). */
  size?: number;
  /** The ItemEncoder arena `bytes` is a view of, until the item is released (ItemEncoder.release). */
  arena?: Arena | undefined;
}

/** Bytes an item counts for in queue limits. */
export function queuedBytes(e: EncodedItem): number {
  return e.size ?? e.bytes.length;
}

/** Estimated bytes per sample (values, index range, attribute index, framing) and per frame of its stack (index and its share of the dictionary). */
const PROFILE_BYTES_PER_SAMPLE = 12;
const PROFILE_BYTES_PER_FRAME = 4;
const PROFILE_BYTES_FIXED = 64;

/** An estimate of a profile's encoded size, without encoding it (queue limits). */
export function estimateProfileBytes(p: ProfileItem): number {
  let n = PROFILE_BYTES_FIXED;
  for (const s of p.samples) n += PROFILE_BYTES_PER_SAMPLE + PROFILE_BYTES_PER_FRAME * s.stack.length;
  return n;
}

/** Writes an AnyValue body. */
export function writeAnyValue(w: ProtoWriter, v: AttributeValue): void {
  switch (typeof v) {
    case "string":
      w.stringField(F.AnyValue.string_value, v);
      return;
    case "boolean":
      w.varintField(F.AnyValue.bool_value, v ? 1 : 0);
      return;
    case "number":
      if (Number.isSafeInteger(v)) {
        w.tag(F.AnyValue.int_value, WIRE.VARINT);
        w.int64(v);
      } else {
        w.doubleField(F.AnyValue.double_value, v);
      }
      return;
    default: {
      const at = w.open(F.AnyValue.array_value);
      for (const e of v) {
        const m = w.open(F.ArrayValue.values);
        writeAnyValue(w, e);
        w.end(m);
      }
      w.end(at);
    }
  }
}

/**
 * The KeyValue.key field (tag, length, UTF-8) of an attribute name: its bytes, and the same bytes as little-endian
 * 32-bit words (the last one padded with zeros), copied four bytes at a time (~11 ns for a 22-byte key against
 * ~31 ns byte by byte or ~33 ns with a native set, measured here).
 */
export interface KeyField {
  readonly bytes: Uint8Array;
  readonly words: Int32Array;
}

/** Key fields of the attribute names seen; emptied when full. */
const KEY_FIELDS_KEPT = 4096;
const keyFields = new Map<string, KeyField>();

/** The key field of an attribute name; kept per name (callers may keep it too). */
export function keyField(key: string): KeyField {
  let f = keyFields.get(key);
  if (f === undefined) {
    const w = new ProtoWriter(16 + key.length * 3);
    w.stringField(F.KeyValue.key, key);
    const bytes = w.copy();
    const words = new Int32Array((bytes.length + 3) >> 2);
    const padded = new Uint8Array(words.length * 4);
    padded.set(bytes);
    const view = new DataView(padded.buffer);
    for (let i = 0; i < words.length; i++) words[i] = view.getInt32(i * 4, true);
    f = { bytes, words };
    if (keyFields.size >= KEY_FIELDS_KEPT) keyFields.clear();
    keyFields.set(key, f);
  }
  return f;
}

/** Bytes a key field's words may write past its end (overwritten by what follows). */
const KEY_OVERRUN = 3;

/**
 * Writes, from `p`, the start of a KeyValue field (number below 16) whose body of `body` bytes (under 128) begins
 * with `key`: the field's tag and length, then the key field (its words; up to KEY_OVERRUN bytes after it are
 * clobbered, for the caller to write). Returns the position after the key field. The caller ensured the room.
 */
function keyValueHead(w: ProtoWriter, p: number, field: number, body: number, key: KeyField): number {
  const b = w.buf;
  b[p] = (field << 3) | WIRE.LEN;
  b[p + 1] = body;
  const v = w.view;
  const words = key.words;
  for (let i = 0, q = p + 2; i < words.length; i++, q += 4) v.setInt32(q, words[i]!, true);
  return p + 2 + key.bytes.length;
}

/**
 * Writes the framing of a KeyValue field (number below 16) of a key field and an AnyValue of `anyBytes` bytes, when
 * every length takes one byte: returns where the caller writes the AnyValue's bytes; -1, with nothing written, when
 * the message is too long. The writer's position is not moved.
 */
function beginShortKeyValue(w: ProtoWriter, field: number, key: KeyField, anyBytes: number): number {
  const body = key.bytes.length + 2 + anyBytes;
  if (body > 0x7f || field > 15) return -1;
  w.ensure(2 + body + KEY_OVERRUN);
  const b = w.buf;
  const p = keyValueHead(w, w.pos, field, body, key);
  b[p] = (F.KeyValue.value << 3) | WIRE.LEN;
  b[p + 1] = anyBytes;
  return p + 2;
}

/**
 * Writes the framing of a KeyValue field (number below 16) of a key field and a string value of `n` one-byte
 * (ASCII) characters, when every length takes one byte: returns where the caller writes the `n` bytes (the
 * writer's position is already past them); -1, with nothing written, when the message is too long.
 */
export function beginShortStringKeyValue(w: ProtoWriter, field: number, key: KeyField, n: number): number {
  let p = beginShortKeyValue(w, field, key, 2 + n);
  if (p < 0) return -1;
  const b = w.buf;
  b[p++] = (F.AnyValue.string_value << 3) | WIRE.LEN;
  b[p++] = n;
  w.pos = p + n;
  return p;
}

/**
 * Writes a KeyValue field (number below 16) of a key field (keyField) and a string value when the value is ASCII
 * and the message is under 128 bytes: every length then takes one byte and is known before writing, so the
 * message is written in one go (the general path reserves each length byte and patches it). True when written;
 * false, with nothing written, otherwise.
 */
function writeShortStringKeyValue(w: ProtoWriter, field: number, key: KeyField, s: string): boolean {
  const n = s.length;
  const start = w.pos;
  let p = beginShortStringKeyValue(w, field, key, n);
  if (p < 0) return false;
  const b = w.buf;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x80) {
      w.pos = start;
      return false;
    }
    b[p++] = c;
  }
  return true;
}

/**
 * writeShortStringKeyValue for an integer value from 0 to 2^28 - 1 (a varint of at most 4 bytes: ports, status
 * codes, pids): the KeyValue holds the key field, then KeyValue.value (tag, length) holding AnyValue.int_value (tag, varint).
 */
function writeShortIntKeyValue(w: ProtoWriter, field: number, key: KeyField, v: number): boolean {
  if (!(v >= 0 && v < 0x1000_0000 && v === Math.floor(v))) return false;
  const n = v < 0x80 ? 1 : v < 0x4000 ? 2 : v < 0x20_0000 ? 3 : 4;
  let p = beginShortKeyValue(w, field, key, 1 + n);
  if (p < 0) return false;
  const b = w.buf;
  b[p++] = (F.AnyValue.int_value << 3) | WIRE.VARINT;
  while (v > 0x7f) {
    b[p++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  b[p++] = v;
  w.pos = p;
  return true;
}

/**
 * Writes one attribute as a KeyValue field: `key` is its key field (keyField). Nothing for an undefined or null
 * value.
 */
export function writeKeyValue(w: ProtoWriter, field: number, key: KeyField, v: AttributeValue | undefined | null): void {
  if (v === undefined || v === null) return;
  /* Most values are short ASCII strings or small integers: written in one go (the general path reserves and patches each length). */
  if (typeof v === "string" ? writeShortStringKeyValue(w, field, key, v) : typeof v === "number" && writeShortIntKeyValue(w, field, key, v)) return;
  const kv = w.open(field);
  w.short(key.bytes);
  const av = w.open(F.KeyValue.value);
  writeAnyValue(w, v);
  w.end(av);
  w.end(kv);
}

/** Writes each attribute as a repeated KeyValue field. */
export function writeAttributes(w: ProtoWriter, field: number, attributes: Attributes | undefined): void {
  if (!attributes) return;
  for (const key in attributes) writeKeyValue(w, field, keyField(key), attributes[key]);
}

/** The KeyValue fields writeAttributes writes for `attributes`, as bytes of their own (to be written again with ProtoWriter.raw). */
export function encodeAttributeFields(field: number, attributes: Attributes): Uint8Array {
  const w = new ProtoWriter(256);
  writeAttributes(w, field, attributes);
  return w.copy();
}

export function writeSpan(w: ProtoWriter, s: SpanItem): void {
  const S = F.Span;
  w.bytesField(S.trace_id, s.traceId);
  w.bytesField(S.span_id, s.spanId);
  if (s.traceState) w.stringField(S.trace_state, s.traceState);
  if (s.parentSpanId && s.parentSpanId.length) w.bytesField(S.parent_span_id, s.parentSpanId);
  w.stringField(S.name, s.name);
  if (s.kind) w.varintField(S.kind, s.kind);
  w.fixed64Field(S.start_time_unix_nano, s.startTimeUnixNano);
  w.fixed64Field(S.end_time_unix_nano, s.endTimeUnixNano);
  if (s.writeAttributes) s.writeAttributes(w, S.attributes);
  else writeAttributes(w, S.attributes, s.attributes);
  if (s.events)
    for (const e of s.events) {
      const m = w.open(S.events);
      w.fixed64Field(F.Event.time_unix_nano, e.timeUnixNano);
      w.stringField(F.Event.name, e.name);
      writeAttributes(w, F.Event.attributes, e.attributes);
      w.end(m);
    }
  if (s.links)
    for (const l of s.links) {
      const m = w.open(S.links);
      w.bytesField(F.Link.trace_id, l.traceId);
      w.bytesField(F.Link.span_id, l.spanId);
      if (l.traceState) w.stringField(F.Link.trace_state, l.traceState);
      writeAttributes(w, F.Link.attributes, l.attributes);
      w.end(m);
    }
  if (s.status && (s.status.code || s.status.message)) {
    const m = w.open(S.status);
    if (s.status.message) w.stringField(F.Status.message, s.status.message);
    if (s.status.code) w.varintField(F.Status.code, s.status.code);
    w.end(m);
  }
  if (s.flags) w.fixed32Field(S.flags, s.flags);
}

export function writeDataPoint(w: ProtoWriter, p: MetricPointItem): void {
  if (p.type === "histogram") {
    const H = F.HistogramDataPoint;
    writeAttributes(w, H.attributes, p.attributes);
    if (p.startTimeUnixNano !== undefined) w.fixed64Field(H.start_time_unix_nano, p.startTimeUnixNano);
    w.fixed64Field(H.time_unix_nano, p.timeUnixNano);
    w.tag(H.count, WIRE.FIXED64);
    w.fixed64n(p.count);
    if (p.sum !== undefined) w.doubleField(H.sum, p.sum);
    if (p.bucketCounts.length) {
      w.tag(H.bucket_counts, WIRE.LEN);
      w.varint(p.bucketCounts.length * 8);
      for (const c of p.bucketCounts) w.fixed64n(c);
    }
    if (p.explicitBounds.length) {
      w.tag(H.explicit_bounds, WIRE.LEN);
      w.varint(p.explicitBounds.length * 8);
      for (const b of p.explicitBounds) w.double(b);
    }
    if (p.exemplars)
      for (const e of p.exemplars) {
        const m = w.open(H.exemplars);
        w.fixed64Field(F.Exemplar.time_unix_nano, e.timeUnixNano);
        w.doubleField(F.Exemplar.as_double, e.value);
        if (e.spanId) w.bytesField(F.Exemplar.span_id, e.spanId);
        if (e.traceId) w.bytesField(F.Exemplar.trace_id, e.traceId);
        w.end(m);
      }
    if (p.min !== undefined) w.doubleField(H.min, p.min);
    if (p.max !== undefined) w.doubleField(H.max, p.max);
    return;
  }
  const N = F.NumberDataPoint;
  writeAttributes(w, N.attributes, p.attributes);
  if (p.startTimeUnixNano !== undefined) w.fixed64Field(N.start_time_unix_nano, p.startTimeUnixNano);
  w.fixed64Field(N.time_unix_nano, p.timeUnixNano);
  if (p.integer) {
    w.sfixed64Field(N.as_int, p.value);
  } else {
    w.doubleField(N.as_double, p.value);
  }
}

export function writeLogRecord(w: ProtoWriter, r: LogRecordItem): void {
  const L = F.LogRecord;
  if (r.timeUnixNano !== undefined) w.fixed64Field(L.time_unix_nano, r.timeUnixNano);
  w.fixed64Field(L.observed_time_unix_nano, r.observedTimeUnixNano);
  if (r.severityNumber) w.varintField(L.severity_number, r.severityNumber);
  if (r.severityText) w.stringField(L.severity_text, r.severityText);
  if (r.body !== undefined) {
    const m = w.open(L.body);
    writeAnyValue(w, r.body);
    w.end(m);
  }
  writeAttributes(w, L.attributes, r.attributes);
  if (r.flags) w.fixed32Field(L.flags, r.flags);
  if (r.traceId) w.bytesField(L.trace_id, r.traceId);
  if (r.spanId) w.bytesField(L.span_id, r.spanId);
  if (r.eventName) w.stringField(L.event_name, r.eventName);
}

/** Encoded Resource body of the given attributes. */
export function encodeResource(attributes: Attributes): Uint8Array {
  const w = new ProtoWriter(1024);
  writeAttributes(w, F.Resource.attributes, attributes);
  return w.copy();
}

const scopeCache = new WeakMap<Scope, Uint8Array>();

/** Encoded InstrumentationScope body (cached per scope object). */
export function encodeScope(scope: Scope): Uint8Array {
  let b = scopeCache.get(scope);
  if (!b) {
    const w = new ProtoWriter(256);
    w.stringField(F.InstrumentationScope.name, scope.name);
    if (scope.version) w.stringField(F.InstrumentationScope.version, scope.version);
    b = w.copy();
    scopeCache.set(scope, b);
  }
  return b;
}

/** Gives the encoded Resource of items carrying `extra` attributes (undefined: the agent's own resource). */
export type ResourceEncoder = (extra: Attributes | undefined) => Uint8Array;

/**
 * Encodes items of one signal for the queue. Uses one shared writer: call from one thread (the event loop),
 * and never re-entrantly.
 */
export class ItemEncoder {
  /** Writes spans, points and records straight into the arenas. */
  readonly #aw = new ProtoWriter(0);
  readonly #resource: ResourceEncoder;
  /** One arena per signal: a signal's queue is FIFO, so at most two of its arenas hold dead space at any time. */
  readonly #arenas = new Map<Signal, Arena>();
  /** Per signal, a retired arena whose items were all released: written again instead of a new one. */
  readonly #spares = new Map<Signal, Arena>();

  constructor(resource: ResourceEncoder) {
    this.#resource = resource;
  }

  /** Points the arena writer at the free space of the signal's arena (a new arena when less than an item's worth is left). */
  #begin(signal: Signal): Arena {
    let arena = this.#arenas.get(signal);
    if (!arena || arena.buf.length - arena.used < ARENA_BYTES / 8) {
      if (arena) this.#retire(arena);
      arena = this.#spares.get(signal);
      if (arena) {
        this.#spares.delete(signal);
        arena.used = 0;
        arena.retired = false;
      } else {
        /* Not zero-filled: only bytes written are ever read. */
        arena = { signal, buf: allocate(ARENA_BYTES), used: 0, live: 0, retired: false };
      }
      this.#arenas.set(signal, arena);
    }
    this.#aw.attach(arena.buf, arena.used);
    return arena;
  }

  /**
   * The item just written into `arena` by #begin's writer, as a view (one allocation per ARENA_BYTES instead of
   * one per item, and no copy). An item that outgrew the arena is copied out of the writer's larger buffer.
   * An arena is freed when no queued item refers to it any more.
   */
  #end(signal: Signal, arena: Arena): Uint8Array {
    const w = this.#aw;
    const at = arena.used;
    if (w.buf !== arena.buf) {
      this.#arenas.delete(signal);
      this.#retire(arena);
      return w.buf.slice(at, w.pos);
    }
    arena.used = w.pos;
    arena.live++;
    return arena.buf.subarray(at, w.pos);
  }

  /** `arena` when the item #end just returned is a view of it, undefined for a copy (the writer outgrew the arena). */
  #arenaOfLast(arena: Arena): Arena | undefined {
    return this.#aw.buf === arena.buf ? arena : undefined;
  }

  #retire(arena: Arena): void {
    arena.retired = true;
    this.#spareIfFree(arena);
  }

  /** A retired arena with no item left becomes its signal's spare (when it has none). */
  #spareIfFree(arena: Arena): void {
    if (arena.retired && arena.live === 0 && !this.#spares.has(arena.signal)) this.#spares.set(arena.signal, arena);
  }

  /**
   * The items' bytes will not be read again (their request was assembled): the arenas they were written into may be
   * written again once every item of theirs is released. Releasing an item twice, or one that is a copy (no arena),
   * does nothing. Only items of this encoder may be released here.
   */
  release(items: readonly EncodedItem[]): void {
    for (const e of items) {
      const a = e.arena;
      if (!a) continue;
      e.arena = undefined;
      a.live--;
      this.#spareIfFree(a);
    }
  }

  encode(signal: Signal, item: unknown): EncodedItem {
    switch (signal) {
      case "traces": {
        const s = item as SpanItem;
        const arena = this.#begin(signal);
        writeSpan(this.#aw, s);
        const bytes = this.#end(signal, arena);
        return { bytes, scope: s.scope, resource: s.resource, arena: this.#arenaOfLast(arena) };
      }
      case "metrics": {
        const p = item as MetricPointItem;
        const arena = this.#begin(signal);
        writeDataPoint(this.#aw, p);
        const bytes = this.#end(signal, arena);
        return { bytes, scope: p.scope, resource: p.resource, metric: p, metricKey: metricKey(p), arena: this.#arenaOfLast(arena) };
      }
      case "logs": {
        const r = item as LogRecordItem;
        const arena = this.#begin(signal);
        writeLogRecord(this.#aw, r);
        const bytes = this.#end(signal, arena);
        return { bytes, scope: r.scope, resource: r.resource, arena: this.#arenaOfLast(arena) };
      }
      case "profiles": {
        const p = item as ProfileItem;
        validateProfile(p);
        // The resource is encoded (and cached by the resource encoder) now, so that one it cannot encode is refused at submit.
        this.#resource(p.resource);
        return { bytes: EMPTY, scope: p.scope, resource: p.resource, profile: p, size: estimateProfileBytes(p) };
      }
    }
  }
}

const EMPTY = new Uint8Array(0);

/** Refuses at submit what writeProfilesRequest could not write (the batch would fail as a whole when sent). */
function validateProfile(p: ProfileItem): void {
  if (typeof p.timeUnixNano !== "bigint" || typeof p.durationNanos !== "bigint") throw new TypeError("profile: timeUnixNano and durationNanos must be bigints");
  if (!Array.isArray(p.samples)) throw new TypeError("profile: samples must be an array");
  for (const s of p.samples) {
    if (!Array.isArray(s.stack) || !Number.isSafeInteger(s.value)) throw new TypeError("profile: a sample needs a stack array and an integer value");
    for (const f of s.stack)
      if (typeof f.function !== "string" || (f.address !== undefined && typeof f.address !== "bigint") || (f.buildId !== undefined && typeof f.buildId !== "string"))
        throw new TypeError("profile: a frame needs a function name (and a bigint address, a string build id)");
  }
}

function metricKey(p: MetricPointItem): string {
  const temporality = p.type === "gauge" ? 0 : p.temporality;
  const monotonic = p.type === "sum" && p.monotonic ? 1 : 0;
  return `${p.type}\u0000${p.name}\u0000${p.unit ?? ""}\u0000${p.description ?? ""}\u0000${temporality}\u0000${monotonic}`;
}

/** Fields of the three levels of a request (ResourceX, ScopeX, item) per signal. */
const LEVELS: Record<Exclude<Signal, "profiles">, { top: number; resource: number; scopes: number; scope: number; items: number }> = {
  traces: { top: 1, resource: 1, scopes: 2, scope: 1, items: 2 },
  metrics: { top: 1, resource: 1, scopes: 2, scope: 1, items: 2 },
  logs: { top: 1, resource: 1, scopes: 2, scope: 1, items: 2 },
};

/** Groups entries by resource object, then scope object, keeping order. */
function group(entries: readonly EncodedItem[]): Map<Attributes | undefined, Map<Scope, EncodedItem[]>> {
  const out = new Map<Attributes | undefined, Map<Scope, EncodedItem[]>>();
  for (const e of entries) {
    let scopes = out.get(e.resource);
    if (!scopes) out.set(e.resource, (scopes = new Map()));
    const scope = e.scope ?? DEFAULT_SCOPE;
    let list = scopes.get(scope);
    if (!list) scopes.set(scope, (list = []));
    list.push(e);
  }
  return out;
}

/** Bytes reserved per item and per request for the framing around encoded items. */
const FRAMING_BYTES_PER_ITEM = 6;
const FRAMING_BYTES_PER_REQUEST = 4096;

/**
 * Assembles the Export<Signal>ServiceRequest of a batch into `writer` (emptied first; by default a new one sized
 * for the batch) and returns a view of the writer's bytes: valid until the writer is written again.
 */
export function buildRequest(signal: Signal, entries: readonly EncodedItem[], resource: ResourceEncoder, writer?: ProtoWriter): Uint8Array {
  let estimate = FRAMING_BYTES_PER_REQUEST;
  for (const e of entries) estimate += queuedBytes(e) + FRAMING_BYTES_PER_ITEM;
  const w = writer ?? new ProtoWriter(estimate);
  w.reset();
  w.ensure(estimate);
  if (signal === "profiles") writeProfilesRequest(w, entries, resource);
  else writeGroupedRequest(w, signal, entries, resource);
  return w.buf.subarray(0, w.pos);
}

function writeGroupedRequest(w: ProtoWriter, signal: Exclude<Signal, "profiles">, entries: readonly EncodedItem[], resource: ResourceEncoder): void {
  // The usual batch: one resource and one scope for all (no grouping maps needed).
  const head = entries[0];
  let uniform = head !== undefined;
  for (let i = 1; uniform && i < entries.length; i++) uniform = entries[i]!.resource === head!.resource && entries[i]!.scope === head!.scope;
  const groups = uniform ? [[head!.resource, [[head!.scope ?? DEFAULT_SCOPE, entries]]] as const] : group(entries);
  const L = LEVELS[signal];
  if (signal !== "metrics") {
    /* Spans and log records: every length is known before writing, so each message is written once, its length
     * first (open/end would move the whole of a group's body once it passes 127 bytes, twice per group). */
    for (const [res, scopes] of groups) {
      const resourceBytes = resource(res);
      let topBody = fieldBytes(resourceBytes.length);
      const scopeBodies: number[] = [];
      for (const [scope, list] of scopes) {
        let body = fieldBytes(encodeScope(scope).length);
        for (const e of list) body += fieldBytes(e.bytes.length);
        scopeBodies.push(body);
        topBody += fieldBytes(body);
      }
      w.tag(L.top, WIRE.LEN);
      w.varint(topBody);
      w.bytesField(L.resource, resourceBytes);
      let i = 0;
      for (const [scope, list] of scopes) {
        w.tag(L.scopes, WIRE.LEN);
        w.varint(scopeBodies[i++]!);
        w.bytesField(L.scope, encodeScope(scope));
        for (const e of list) w.bytesField(L.items, e.bytes);
      }
    }
    return;
  }
  for (const [res, scopes] of groups) {
    const top = w.open(L.top);
    w.bytesField(L.resource, resource(res));
    for (const [scope, list] of scopes) {
      const sm = w.open(L.scopes);
      w.bytesField(L.scope, encodeScope(scope));
      writeMetrics(w, list);
      w.end(sm);
    }
    w.end(top);
  }
}

/** Bytes of a length-delimited field of `n` bytes whose number is below 16 (one tag byte, the length varint, the bytes). */
function fieldBytes(n: number): number {
  let v = 1;
  for (let x = n; x > 0x7f; x = Math.floor(x / 128)) v++;
  return 1 + v + n;
}

function writeMetrics(w: ProtoWriter, list: readonly EncodedItem[]): void {
  const byMetric = new Map<string, EncodedItem[]>();
  for (const e of list) {
    const k = e.metricKey!;
    let l = byMetric.get(k);
    if (!l) byMetric.set(k, (l = []));
    l.push(e);
  }
  for (const points of byMetric.values()) {
    const head = points[0]!.metric!;
    const M = F.Metric;
    const m = w.open(F.ScopeMetrics.metrics);
    w.stringField(M.name, head.name);
    if (head.description) w.stringField(M.description, head.description);
    if (head.unit) w.stringField(M.unit, head.unit);
    const dataField = head.type === "gauge" ? M.gauge : head.type === "sum" ? M.sum : M.histogram;
    const d = w.open(dataField);
    for (const p of points) w.bytesField(F.Gauge.data_points, p.bytes);
    if (head.type !== "gauge" && head.temporality) w.varintField(F.Sum.aggregation_temporality, head.temporality);
    if (head.type === "sum" && head.monotonic) w.varintField(F.Sum.is_monotonic, 1);
    w.end(d);
    w.end(m);
  }
}

type Frame = { function: string; file?: string; line?: number; address?: bigint; binary?: string; buildId?: string };

/** The semantic-conventions attribute of a mapping's GNU build id. */
const BUILD_ID_ATTRIBUTE = "process.executable.build_id.gnu";

/**
 * Content ids of frames, shared by every request: a frame object's keys are built once in its life (collectors
 * reuse one object per distinct frame), so a request maps numbers to its own indices instead of building strings.
 * The tables are renewed (between requests only) when they reach MAX_FRAME_IDS.
 */
let frameIds = new WeakMap<object, { fn: number; loc: number }>();
let functionIds = new Map<string, number>();
let locationIds = new Map<string, number>();
const MAX_FRAME_IDS = 500_000;

function idsOf(f: Frame): { fn: number; loc: number } {
  let ids = frameIds.get(f);
  if (ids) return ids;
  const fk = `${f.function}\u0000${f.file ?? ""}`;
  let fn = functionIds.get(fk);
  if (fn === undefined) functionIds.set(fk, (fn = functionIds.size));
  const lk = `${fn}\u0000${f.line ?? 0}\u0000${f.address ?? 0n}\u0000${f.binary ?? ""}\u0000${f.buildId ?? ""}`;
  let loc = locationIds.get(lk);
  if (loc === undefined) locationIds.set(lk, (loc = locationIds.size));
  frameIds.set(f, (ids = { fn, loc }));
  return ids;
}

/** The zero Link of link_table[0]: ids of the lengths the schema gives them, all zero (as the schema recommends). */
const ZERO_TRACE_ID = new Uint8Array(16);
const ZERO_SPAN_ID = new Uint8Array(8);

/**
 * The dictionary (ProfilesDictionary) one profiles request shares. Index 0 of every table is the table's zero
 * value, present, so that an index of 0 means "none"; entries are unique by value.
 */
class ProfilesDictionary {
  readonly strings = new Map<string, number>([["", 0]]);
  /** Mappings by binary and build id, in index order (index 0: the zero Mapping). */
  readonly mappings = new Map<string, { index: number; file: number; attributes: number[] }>([["", { index: 0, file: 0, attributes: [] }]]);
  /** By content id (idsOf), in index order. */
  readonly functions = new Map<number, { index: number; name: number; file: number }>();
  readonly locations = new Map<number, { index: number; mapping: number; address: bigint; fn: number; line: number }>();
  readonly attributes = new Map<string, { index: number; key: number; value: AttributeValue }>();
  /** Stacks in index order (from 1). */
  readonly stacks: number[][] = [];
  /** Stack indices by a hash of their location indices (a list: hashes may collide). */
  readonly #stackByHash = new Map<number, number[]>();
  /** Location indices of the stack being looked up (reused: a new stack is copied out of it). */
  #scratch: number[] = [];
  /**
   * Location index by frame object: collectors reuse one object per distinct frame (the symbolizer caches
   * them), so most frames cost one identity lookup instead of building string keys.
   */
  readonly #byFrame = new Map<object, number>();
  /** Attribute indices by attributes object (samples of a thread share one). */
  readonly #byAttributes = new Map<object, number[]>();
  /** One array per distinct list of attribute indices, so that samples compare them by identity. */
  readonly #attributeLists = new Map<string, number[]>();

  constructor() {
    if (locationIds.size >= MAX_FRAME_IDS || functionIds.size >= MAX_FRAME_IDS) {
      frameIds = new WeakMap();
      functionIds = new Map();
      locationIds = new Map();
    }
  }

  str(s: string): number {
    let i = this.strings.get(s);
    if (i === undefined) this.strings.set(s, (i = this.strings.size));
    return i;
  }

  attribute(key: string, value: AttributeValue): number {
    const k = `${key}\u0000${JSON.stringify(value)}`;
    let a = this.attributes.get(k);
    if (!a) this.attributes.set(k, (a = { index: this.attributes.size + 1, key: this.str(key), value }));
    return a.index;
  }

  /** The attribute indices of an attributes object (computed once per object; equal lists are one array). */
  attributeIndices(attributes: Attributes): number[] {
    let out = this.#byAttributes.get(attributes);
    if (!out) {
      out = [];
      for (const k in attributes) {
        const v = attributes[k];
        if (v !== undefined && v !== null) out.push(this.attribute(k, v));
      }
      const key = out.join(",");
      const known = this.#attributeLists.get(key);
      if (known) out = known;
      else this.#attributeLists.set(key, out);
      this.#byAttributes.set(attributes, out);
    }
    return out;
  }

  /** The stack_table index of a stack (leaf first). */
  stack(frames: readonly Frame[]): number {
    const n = frames.length;
    const locations = this.#scratch;
    locations.length = n;
    let hash = n;
    for (let i = 0; i < n; i++) {
      const loc = this.location(frames[i]!);
      locations[i] = loc;
      hash = (Math.imul(hash, 0x01000193) ^ loc) | 0;
    }
    let candidates = this.#stackByHash.get(hash);
    if (candidates) {
      for (const index of candidates) {
        const known = this.stacks[index - 1]!;
        if (known.length !== n) continue;
        let i = 0;
        while (i < n && known[i] === locations[i]) i++;
        if (i === n) return index;
      }
    } else this.#stackByHash.set(hash, (candidates = []));
    this.stacks.push(locations.slice());
    candidates.push(this.stacks.length);
    return this.stacks.length;
  }

  location(f: Frame): number {
    let i = this.#byFrame.get(f);
    if (i === undefined) this.#byFrame.set(f, (i = this.#location(f)));
    return i;
  }

  #location(f: Frame): number {
    const ids = idsOf(f);
    let loc = this.locations.get(ids.loc);
    if (loc) return loc.index;
    let fn = this.functions.get(ids.fn);
    if (!fn) this.functions.set(ids.fn, (fn = { index: this.functions.size + 1, name: this.str(f.function), file: this.str(f.file ?? "") }));
    const mapping = f.binary ? this.#mapping(f.binary, f.buildId) : 0;
    this.locations.set(ids.loc, (loc = { index: this.locations.size + 1, mapping, address: f.address ?? 0n, fn: fn.index, line: f.line ?? 0 }));
    return loc.index;
  }

  #mapping(binary: string, buildId: string | undefined): number {
    const key = buildId ? `${binary}\u0000${buildId}` : binary;
    let m = this.mappings.get(key);
    if (!m) this.mappings.set(key, (m = { index: this.mappings.size, file: this.str(binary), attributes: buildId ? [this.attribute(BUILD_ID_ATTRIBUTE, buildId)] : [] }));
    return m.index;
  }

  /** Writes the tables (every string was interned before: the string table is written as it stands). */
  write(w: ProtoWriter): void {
    const D = F.ProfilesDictionary;
    for (const mapping of this.mappings.values()) {
      const m = w.open(D.mapping_table);
      if (mapping.file) w.varintField(F.Mapping.filename_strindex, mapping.file);
      writePackedVarints(w, F.Mapping.attribute_indices, mapping.attributes);
      w.end(m);
    }
    w.end(w.open(D.location_table));
    for (const loc of this.locations.values()) {
      const m = w.open(D.location_table);
      if (loc.mapping) w.varintField(F.Location.mapping_index, loc.mapping);
      if (loc.address) {
        w.tag(F.Location.address, WIRE.VARINT);
        w.varintBig(loc.address);
      }
      const line = w.open(F.Location.lines);
      w.varintField(F.Line.function_index, loc.fn);
      if (loc.line) {
        w.tag(F.Line.line, WIRE.VARINT);
        w.int64(loc.line);
      }
      w.end(line);
      w.end(m);
    }
    w.end(w.open(D.function_table));
    for (const fn of this.functions.values()) {
      const m = w.open(D.function_table);
      if (fn.name) {
        w.varintField(F.Function.name_strindex, fn.name);
        w.varintField(F.Function.system_name_strindex, fn.name);
      }
      if (fn.file) w.varintField(F.Function.filename_strindex, fn.file);
      w.end(m);
    }
    const link = w.open(D.link_table);
    w.bytesField(F.ProfilesLink.trace_id, ZERO_TRACE_ID);
    w.bytesField(F.ProfilesLink.span_id, ZERO_SPAN_ID);
    w.end(link);
    for (const s of this.strings.keys()) w.stringField(D.string_table, s);
    w.end(w.open(D.attribute_table));
    for (const a of this.attributes.values()) {
      const m = w.open(D.attribute_table);
      w.varintField(F.KeyValueAndUnit.key_strindex, a.key);
      const v = w.open(F.KeyValueAndUnit.value);
      writeAnyValue(w, a.value);
      w.end(v);
      w.end(m);
    }
    w.end(w.open(D.stack_table));
    for (const locations of this.stacks) {
      const m = w.open(D.stack_table);
      writePackedVarints(w, F.Stack.location_indices, locations);
      w.end(m);
    }
  }
}

function writeValueType(w: ProtoWriter, field: number, d: ProfilesDictionary, t: { type: string; unit: string }): void {
  const m = w.open(field);
  w.varintField(F.ValueType.type_strindex, d.str(t.type));
  w.varintField(F.ValueType.unit_strindex, d.str(t.unit));
  w.end(m);
}

function writePackedVarints(w: ProtoWriter, field: number, values: readonly number[]): void {
  if (!values.length) return;
  const m = w.open(field);
  for (const v of values) w.int64(v);
  w.end(m);
}

const NO_ATTRIBUTES: number[] = [];

/**
 * Writes one Profile. Samples of equal identity (stack and attributes; no links are sent) are combined into one
 * whose value is their sum, as the schema asks; every sample carries one value (aggregated counts, no timestamps).
 */
function writeProfile(w: ProtoWriter, d: ProfilesDictionary, p: ProfileItem): void {
  const P = F.Profile;
  writeValueType(w, P.sample_type, d, p.sampleType);
  // Samples by attribute list (one array per distinct list: see attributeIndices), then by stack index.
  const byAttributes = new Map<number[], Map<number, { stack: number; attributes: number[]; value: number }>>();
  const samples: Array<{ stack: number; attributes: number[]; value: number }> = [];
  for (const s of p.samples) {
    const stack = d.stack(s.stack);
    const attributes = s.attributes ? d.attributeIndices(s.attributes) : NO_ATTRIBUTES;
    let byStack = byAttributes.get(attributes);
    if (!byStack) byAttributes.set(attributes, (byStack = new Map()));
    const known = byStack.get(stack);
    if (known) known.value += s.value;
    else {
      const sample = { stack, attributes, value: s.value };
      byStack.set(stack, sample);
      samples.push(sample);
    }
  }
  for (const s of samples) {
    const sm = w.open(P.samples);
    w.varintField(F.Sample.stack_index, s.stack);
    writePackedVarints(w, F.Sample.attribute_indices, s.attributes);
    const values = w.open(F.Sample.values);
    w.int64(s.value);
    w.end(values);
    w.end(sm);
  }
  w.fixed64Field(P.time_unix_nano, p.timeUnixNano);
  w.tag(P.duration_nano, WIRE.VARINT);
  w.varintBig(p.durationNanos);
  if (p.periodType) writeValueType(w, P.period_type, d, p.periodType);
  if (p.period) {
    w.tag(P.period, WIRE.VARINT);
    w.int64(p.period);
  }
  if (p.profileId) w.bytesField(P.profile_id, p.profileId);
  if (p.attributes) writePackedVarints(w, P.attribute_indices, d.attributeIndices(p.attributes));
}

function writeProfilesRequest(w: ProtoWriter, entries: readonly EncodedItem[], resource: ResourceEncoder): void {
  const d = new ProfilesDictionary();
  for (const [res, scopes] of group(entries)) {
    const top = w.open(F.ExportProfilesServiceRequest.resource_profiles);
    w.bytesField(F.ResourceProfiles.resource, resource(res));
    for (const [scope, list] of scopes) {
      const sp = w.open(F.ResourceProfiles.scope_profiles);
      w.bytesField(F.ScopeProfiles.scope, encodeScope(scope));
      for (const e of list) {
        const pm = w.open(F.ScopeProfiles.profiles);
        writeProfile(w, d, e.profile!);
        w.end(pm);
      }
      w.end(sp);
    }
    w.end(top);
  }
  const dm = w.open(F.ExportProfilesServiceRequest.dictionary);
  d.write(w);
  w.end(dm);
}
