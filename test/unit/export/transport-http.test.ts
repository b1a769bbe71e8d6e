/** How OTLP/HTTP answers become outcomes (the specification's retry rules for HTTP); a redirect on loopback. */
import { describe, expect, test } from "bun:test";
import { status as GrpcStatus } from "@grpc/grpc-js";
import { successOf } from "../../../src/export/transport";
import { HttpTransport, errorOutcome, readBounded } from "../../../src/export/transport-http";
import { retryAfterMs } from "../../../src/export/retry-after";
import { parseConfig } from "../../../src/config";
import { signalTarget } from "../../../src/export/config";
import { otlpType } from "../../../src/export/schema";

const none = new Uint8Array(0);

describe("HTTP status to outcome", () => {
  test("429, 502, 503, 504 are retryable; every other 4xx and 5xx is not", () => {
    for (const s of [429, 502, 503, 504]) expect(errorOutcome(s, "", null, none, "").kind).toBe("retryable");
    for (const s of [400, 401, 403, 404, 405, 408, 409, 413, 415, 422, 500, 501, 505]) expect(errorOutcome(s, "", null, none, "").kind).toBe("failure");
  });

  test("codes of the same meaning: 400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 UNIMPLEMENTED, 503 UNAVAILABLE", () => {
    const code = (s: number) => (errorOutcome(s, "", null, none, "") as { code: number }).code;
    expect(code(400)).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect(code(401)).toBe(GrpcStatus.UNAUTHENTICATED);
    expect(code(403)).toBe(GrpcStatus.PERMISSION_DENIED);
    expect(code(404)).toBe(GrpcStatus.UNIMPLEMENTED);
    expect(code(429)).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
    expect(code(503)).toBe(GrpcStatus.UNAVAILABLE);
    expect(code(500)).toBe(GrpcStatus.INTERNAL);
  });

  test("the message names the status and carries a google.rpc.Status body's message", () => {
    const st = otlpType("google.rpc.Status");
    const body = st.encode(st.fromObject({ code: 3, message: "bad span" })).finish();
    expect(errorOutcome(400, "Bad Request", null, body, "application/x-protobuf")).toEqual({ kind: "failure", code: GrpcStatus.INVALID_ARGUMENT, message: "HTTP 400 Bad Request: bad span" });
    expect(errorOutcome(502, "Bad Gateway", null, new TextEncoder().encode("upstream down\n"), "text/plain").kind).toBe("retryable");
  });

  test("Retry-After: delay-seconds or an HTTP date; malformed is no delay", () => {
    expect(retryAfterMs("3")).toBe(3000);
    expect(retryAfterMs(" 0 ")).toBe(0);
    expect(retryAfterMs("Wed, 21 Oct 2015 07:28:05 GMT", Date.parse("Wed, 21 Oct 2015 07:28:00 GMT"))).toBe(5000);
    expect(retryAfterMs("Wed, 21 Oct 2015 07:28:05 GMT", Date.parse("Wed, 21 Oct 2015 07:29:00 GMT"))).toBe(0);
    expect(retryAfterMs("soon")).toBeUndefined();
    // Date.parse reads these as dates (year -5, "5 PM" today, May 2015): they are no HTTP-date, so no delay.
    for (const v of ["-5", "1.5", "5 PM", "+3", "0x10", "May 2015"]) expect(retryAfterMs(v)).toBeUndefined();
    expect(retryAfterMs("Sunday, 06-Nov-94 08:49:37 GMT", Date.parse("Sun, 06 Nov 1994 08:49:30 GMT"))).toBe(7000);
    expect(retryAfterMs("Sun Nov  6 08:49:37 1994", Date.parse("Sun, 06 Nov 1994 08:49:30 GMT"))).toBeGreaterThanOrEqual(0);
    expect(retryAfterMs(null)).toBeUndefined();
    expect(errorOutcome(503, "", "2", none, "")).toMatchObject({ kind: "retryable", delayMs: 2000 });
  });
});

describe("2xx bodies", () => {
  test("partial_success gives the rejected count and message of each signal; an empty body is full success", () => {
    const answer = (type: string, field: string) => {
      const t = otlpType(type);
      return t.encode(t.fromObject({ partialSuccess: { [field]: 7, errorMessage: "7 refused" } })).finish();
    };
    expect(successOf("traces", answer("opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse", "rejectedSpans"))).toEqual({ kind: "success", rejected: 7, message: "7 refused" });
    expect(successOf("metrics", answer("opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceResponse", "rejectedDataPoints"))).toMatchObject({ rejected: 7 });
    expect(successOf("logs", answer("opentelemetry.proto.collector.logs.v1.ExportLogsServiceResponse", "rejectedLogRecords"))).toMatchObject({ rejected: 7 });
    expect(successOf("profiles", answer("opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceResponse", "rejectedProfiles"))).toMatchObject({ rejected: 7 });
    expect(successOf("traces", none)).toEqual({ kind: "success", rejected: 0, message: "" });
  });
});

test("a redirect is not followed (headers carry credentials): a failure naming the Location, readiness fails as for a wrong path", async () => {
  let hits = 0;
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch: () => {
      hits++;
      return new Response(null, { status: 308, headers: { location: "https://elsewhere.example/v1/traces" } });
    },
  });
  try {
    const c = parseConfig("", { OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf", OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${server.port}` });
    const t = new HttpTransport({ otlp: c.otlp, targets: { traces: signalTarget(c.otlp, "traces") } });
    const o = await t.send("traces", new Uint8Array(0), Date.now() + 5000);
    expect(o).toMatchObject({ kind: "failure", code: GrpcStatus.UNIMPLEMENTED });
    expect((o as { message: string }).message).toContain("HTTP 308");
    expect((o as { message: string }).message).toContain("redirected to https://elsewhere.example/v1/traces");
    expect(hits).toBe(1);
  } finally {
    server.stop(true);
  }
});

test("answers are read up to a bound: a larger body (declared or streamed) is cut, not buffered whole", async () => {
  const small = await readBounded(new Response(new Uint8Array(10)), 16);
  expect(small).toMatchObject({ whole: true });
  expect(small.bytes.length).toBe(10);
  expect((await readBounded(new Response(new Uint8Array(32), { headers: { "content-length": "32" } }), 16)).whole).toBe(false);
  let pulled = 0;
  const endless = new ReadableStream<Uint8Array>({
    pull(c) {
      pulled++;
      c.enqueue(new Uint8Array(8));
    },
  });
  const cut = await readBounded(new Response(endless), 16);
  expect(cut.whole).toBe(false);
  expect(cut.bytes.length).toBe(16);
  expect(pulled).toBeLessThan(10);
});
