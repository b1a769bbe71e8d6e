/**
 * Interoperability: what the agent puts on the wire, decoded by an implementation this project did not write
 * (`protoc --decode_raw`, from Debian's protobuf-compiler, which needs no schema), checked field by field
 * against the OTLP field numbers of the specification, for traces, metrics and logs; and a span compared with
 * what the OpenTelemetry JS SDK's serializer (@opentelemetry/otlp-transformer) writes for the same span.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { TestBackend, harness, testConfig, type Harness } from "./harness";
import { parseProtocText } from "../../helpers/protoc";

type Raw = { [field: number]: Array<string | Raw> };

/** protoc --decode_raw text, fields by number. */
const parseRaw = (text: string): Raw => parseProtocText(text) as unknown as Raw;

function decodeRaw(body: Uint8Array): Raw {
  const r = Bun.spawnSync(["protoc", "--decode_raw"], { stdin: body, stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`protoc --decode_raw failed: ${r.stderr.toString()}`);
  return parseRaw(r.stdout.toString());
}

const msg = (r: Raw, ...path: number[]): Raw => path.reduce((node, f) => node[f]![0] as Raw, r);
const all = (r: Raw, f: number): Raw[] => (r[f] ?? []) as Raw[];
const str = (r: Raw, f: number): string => r[f]![0] as string;
/** fixed64 as printed by decode_raw (0x...) to a bigint. */
const fixed64 = (r: Raw, f: number): bigint => BigInt(str(r, f));
const double = (r: Raw, f: number): number => {
  const dv = new DataView(new ArrayBuffer(8));
  dv.setBigUint64(0, BigInt(str(r, f)));
  return dv.getFloat64(0);
};
/** KeyValue list (field f) to { key: AnyValue raw }. */
const kvs = (r: Raw, f: number): Record<string, Raw> => Object.fromEntries(all(r, f).map((kv) => [str(kv, 1), msg(kv, 2)]));
const ascii = (s: string) => new TextEncoder().encode(s);

let backend: TestBackend;
let h: Harness;

beforeAll(async () => {
  backend = await new TestBackend().start();
  h = harness(testConfig({ otlp: { endpoint: backend.endpoint, compression: "gzip" }, service_name: "interop-agent" }));
  await h.start();
});
afterAll(async () => {
  await h.stop();
  await backend.stop();
});

function resourceOf(top: Raw): Record<string, Raw> {
  return kvs(msg(top, 1), 1);
}

test("traces: ExportTraceServiceRequest field by field", async () => {
  h.pipeline.submit("traces", [
    {
      traceId: ascii("0123456789abcdef"),
      spanId: ascii("spanid01"),
      parentSpanId: ascii("parent01"),
      traceState: "vendor=x",
      name: "GET /orders",
      kind: 3,
      startTimeUnixNano: 1_700_000_000_000_000_001n,
      endTimeUnixNano: 1_700_000_000_002_000_000n,
      attributes: { "http.request.method": "GET", "http.response.status_code": 200, retried: true, ratio: 0.25 },
      events: [{ timeUnixNano: 1_700_000_000_001_000_000n, name: "exception", attributes: { "exception.type": "Timeout" } }],
      links: [{ traceId: ascii("fedcba9876543210"), spanId: ascii("linked01") }],
      status: { code: 2, message: "upstream failed" },
      flags: 1,
      scope: { name: "svc-agent/ebpf-http", version: "1.2.3" },
    },
  ]);
  await h.pipeline.flush(5000);
  const req = decodeRaw(backend.requests.find((r) => r.signal === "traces")!.body);
  const rs = msg(req, 1); // ResourceSpans (ExportTraceServiceRequest.resource_spans = 1)
  const res = resourceOf(rs); // ResourceSpans.resource = 1, Resource.attributes = 1
  expect(str(res["service.name"]!, 1)).toBe("interop-agent"); // AnyValue.string_value = 1
  expect(str(res["os.type"]!, 1)).toBe("linux");
  expect(res["host.name"]).toBeDefined();
  const ss = msg(rs, 2); // ResourceSpans.scope_spans = 2
  expect(str(msg(ss, 1), 1)).toBe("svc-agent/ebpf-http"); // ScopeSpans.scope = 1, InstrumentationScope.name = 1
  expect(str(msg(ss, 1), 2)).toBe("1.2.3"); // InstrumentationScope.version = 2
  const span = msg(ss, 2); // ScopeSpans.spans = 2
  expect(str(span, 1)).toBe("0123456789abcdef"); // trace_id = 1
  expect(str(span, 2)).toBe("spanid01"); // span_id = 2
  expect(str(span, 3)).toBe("vendor=x"); // trace_state = 3
  expect(str(span, 4)).toBe("parent01"); // parent_span_id = 4
  expect(str(span, 5)).toBe("GET /orders"); // name = 5
  expect(str(span, 6)).toBe("3"); // kind = 6 (SPAN_KIND_CLIENT)
  expect(fixed64(span, 7)).toBe(1_700_000_000_000_000_001n); // start_time_unix_nano = 7 (fixed64)
  expect(fixed64(span, 8)).toBe(1_700_000_000_002_000_000n); // end_time_unix_nano = 8
  const attrs = kvs(span, 9); // attributes = 9
  expect(str(attrs["http.request.method"]!, 1)).toBe("GET");
  expect(str(attrs["http.response.status_code"]!, 3)).toBe("200"); // AnyValue.int_value = 3
  expect(str(attrs.retried!, 2)).toBe("1"); // AnyValue.bool_value = 2
  expect(double(attrs.ratio!, 4)).toBe(0.25); // AnyValue.double_value = 4
  const ev = msg(span, 11); // events = 11
  expect(fixed64(ev, 1)).toBe(1_700_000_000_001_000_000n);
  expect(str(ev, 2)).toBe("exception");
  expect(str(kvs(ev, 3)["exception.type"]!, 1)).toBe("Timeout");
  const link = msg(span, 13); // links = 13
  expect(str(link, 1)).toBe("fedcba9876543210");
  expect(str(link, 2)).toBe("linked01");
  const st = msg(span, 15); // status = 15: message = 2, code = 3
  expect(str(st, 2)).toBe("upstream failed");
  expect(str(st, 3)).toBe("2");
  expect(Number(str(span, 16))).toBe(1); // flags = 16 (fixed32)
});

test("metrics: ExportMetricsServiceRequest field by field (sum, gauge, histogram)", async () => {
  h.pipeline.submit("metrics", [
    { type: "sum", name: "http.server.requests", unit: "{request}", description: "Requests", value: 42, integer: true, temporality: 2, monotonic: true, startTimeUnixNano: 1_000n, timeUnixNano: 2_000n, attributes: { route: "/orders" } },
    { type: "gauge", name: "process.threads", value: 7.5, timeUnixNano: 3_000n },
    { type: "histogram", name: "http.server.duration", unit: "s", temporality: 1, count: 6, sum: 1.5, min: 0.1, max: 0.9, bucketCounts: [1, 2, 3], explicitBounds: [0.25, 0.5], timeUnixNano: 4_000n },
  ]);
  await h.pipeline.flush(5000);
  const req = decodeRaw(backend.requests.find((r) => r.signal === "metrics")!.body);
  const rm = msg(req, 1); // resource_metrics = 1
  expect(str(resourceOf(rm)["service.name"]!, 1)).toBe("interop-agent");
  const sm = msg(rm, 2); // scope_metrics = 2
  const metrics = Object.fromEntries(all(sm, 2).map((m) => [str(m, 1), m])); // ScopeMetrics.metrics = 2, Metric.name = 1
  const sum = metrics["http.server.requests"]!;
  expect(str(sum, 2)).toBe("Requests"); // description = 2
  expect(str(sum, 3)).toBe("{request}"); // unit = 3
  const sumData = msg(sum, 7); // Metric.sum = 7
  expect(str(sumData, 2)).toBe("2"); // aggregation_temporality = 2 (CUMULATIVE)
  expect(str(sumData, 3)).toBe("1"); // is_monotonic = 3
  const sp = msg(sumData, 1); // data_points = 1 (NumberDataPoint)
  expect(fixed64(sp, 2)).toBe(1_000n); // start_time_unix_nano = 2
  expect(fixed64(sp, 3)).toBe(2_000n); // time_unix_nano = 3
  expect(fixed64(sp, 6)).toBe(42n); // as_int = 6 (sfixed64)
  expect(str(kvs(sp, 7).route!, 1)).toBe("/orders"); // attributes = 7
  const gp = msg(metrics["process.threads"]!, 5, 1); // Metric.gauge = 5, data_points = 1
  expect(double(gp, 4)).toBe(7.5); // as_double = 4
  expect(fixed64(gp, 3)).toBe(3_000n);
  const hist = msg(metrics["http.server.duration"]!, 9); // Metric.histogram = 9
  expect(str(hist, 2)).toBe("1"); // DELTA
  const hp = msg(hist, 1);
  expect(fixed64(hp, 3)).toBe(4_000n);
  expect(fixed64(hp, 4)).toBe(6n); // count = 4 (fixed64)
  expect(double(hp, 5)).toBe(1.5); // sum = 5
  expect(double(hp, 11)).toBe(0.1); // min = 11
  expect(double(hp, 12)).toBe(0.9); // max = 12
  // bucket_counts = 6 (packed fixed64) and explicit_bounds = 7 (packed double) are bytes to decode_raw.
  const bytes = (f: number) => {
    const s = str(hp, f);
    return new DataView(Uint8Array.from(s, (c) => c.charCodeAt(0)).buffer);
  };
  const counts = bytes(6);
  expect([0, 8, 16].map((o) => counts.getBigUint64(o, true))).toEqual([1n, 2n, 3n]);
  const bounds = bytes(7);
  expect([0, 8].map((o) => bounds.getFloat64(o, true))).toEqual([0.25, 0.5]);
});

test("logs: ExportLogsServiceRequest field by field", async () => {
  h.pipeline.submit("logs", [
    {
      timeUnixNano: 5_000n,
      observedTimeUnixNano: 6_000n,
      severityNumber: 17,
      severityText: "ERR",
      body: "connection reset by peer",
      attributes: { "log.file.path": "/var/log/app.log" },
      traceId: ascii("0123456789abcdef"),
      spanId: ascii("spanid01"),
      flags: 1,
      eventName: "orders.failed",
    },
  ]);
  await h.pipeline.flush(5000);
  const req = decodeRaw(backend.requests.find((r) => r.signal === "logs")!.body);
  const rl = msg(req, 1); // resource_logs = 1
  expect(str(resourceOf(rl)["service.name"]!, 1)).toBe("interop-agent");
  const rec = msg(rl, 2, 2); // ResourceLogs.scope_logs = 2, ScopeLogs.log_records = 2
  expect(fixed64(rec, 1)).toBe(5_000n); // time_unix_nano = 1
  expect(fixed64(rec, 11)).toBe(6_000n); // observed_time_unix_nano = 11
  expect(str(rec, 2)).toBe("17"); // severity_number = 2 (ERROR)
  expect(str(rec, 3)).toBe("ERR"); // severity_text = 3
  expect(str(msg(rec, 5), 1)).toBe("connection reset by peer"); // body = 5 (AnyValue.string_value)
  expect(str(kvs(rec, 6)["log.file.path"]!, 1)).toBe("/var/log/app.log"); // attributes = 6
  expect(Number(str(rec, 8))).toBe(1); // flags = 8 (fixed32)
  expect(str(rec, 9)).toBe("0123456789abcdef"); // trace_id = 9
  expect(str(rec, 10)).toBe("spanid01"); // span_id = 10
  expect(str(rec, 12)).toBe("orders.failed"); // event_name = 12
});

test("traces: the span fields match what the OpenTelemetry JS SDK's own serializer (otlp-transformer) writes for the same span", async () => {
  const { BasicTracerProvider } = await import("@opentelemetry/sdk-trace-base");
  const { ProtobufTraceSerializer } = await import("@opentelemetry/otlp-transformer");
  const traceHex = "0af7651916cd43dd8448eb211c80319c";
  const spanHex = "b7ad6b7169203331";
  const ended: any[] = [];
  const provider = new BasicTracerProvider({
    idGenerator: { generateTraceId: () => traceHex, generateSpanId: () => spanHex },
    spanProcessors: [{ onStart() {}, onEnd: (s: any) => void ended.push(s), forceFlush: async () => {}, shutdown: async () => {} }],
  });
  const sdkSpan = provider.getTracer("cmp").startSpan("POST /pay", {
    kind: 1, // SpanKind.SERVER in the API's numbering (INTERNAL=0), i.e. OTLP SPAN_KIND_SERVER = 2
    startTime: [1_700_000_000, 123_456_789],
    attributes: { "http.request.method": "POST", "http.response.status_code": 503, retry: false, share: 0.75 },
  });
  sdkSpan.setStatus({ code: 2, message: "unavailable" });
  sdkSpan.end([1_700_000_001, 5]);
  const theirs = decodeRaw(ProtobufTraceSerializer.serializeRequest(ended) as Uint8Array);

  const before = backend.requests.length;
  h.pipeline.submit("traces", [
    {
      traceId: Uint8Array.from(Buffer.from(traceHex, "hex")),
      spanId: Uint8Array.from(Buffer.from(spanHex, "hex")),
      name: "POST /pay",
      kind: 2,
      startTimeUnixNano: 1_700_000_000_123_456_789n,
      endTimeUnixNano: 1_700_000_001_000_000_005n,
      attributes: { "http.request.method": "POST", "http.response.status_code": 503, retry: false, share: 0.75 },
      status: { code: 2, message: "unavailable" },
    },
  ]);
  await h.pipeline.flush(5000);
  const ours = decodeRaw(backend.requests.slice(before).find((r) => r.signal === "traces")!.body);

  const spanOf = (req: Raw) => msg(req, 1, 2, 2);
  const a = spanOf(ours);
  const b = spanOf(theirs);
  for (const f of [1, 2, 5, 6, 7, 8]) {
    expect(a[f], `Span field ${f}`).toBeDefined();
    expect(a[f], `Span field ${f}`).toEqual(b[f]!);
  }
  expect(Object.keys(kvs(a, 9))).toHaveLength(4);
  expect(kvs(a, 9)).toEqual(kvs(b, 9));
  expect(msg(a, 15)).toEqual(msg(b, 15));
});
