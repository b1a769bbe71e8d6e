import { describe, expect, test } from "bun:test";
import hpack from "hpack.js";
import { ExchangeTracker, IO_READ, IO_WRITE, type CapturedCall, type Io } from "../../../../../src/collectors/network/http/exchanges";
import { parseHead, parseHeadBytes, type HttpExchange } from "../../../../../src/collectors/network/http/parser";
import { exchangeToSpan, type EndpointMeta, type SpanContext } from "../../../../../src/collectors/network/http/spans";
import { parseTraceparent, spanFlagsOf } from "../../../../../src/collectors/network/http/trace-context";

/** The W3C recommendation's example. */
const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT = "00f067aa0ba902b7";
const VALID = `00-${TRACE}-${PARENT}-01`;
const hex = (b: Uint8Array | undefined) => (b ? Buffer.from(b).toString("hex") : undefined);

describe("traceparent (W3C Trace Context)", () => {
  test("a valid value gives the trace id, the caller's span and the flags; surrounding whitespace is allowed", () => {
    const p = parseTraceparent(` ${VALID}\t`)!;
    expect([hex(p.traceId), hex(p.parentId), p.flags]).toEqual([TRACE, PARENT, 1]);
    expect(parseTraceparent(`00-${TRACE}-${PARENT}-00`)!.flags).toBe(0);
    // A later version may carry more fields after a "-".
    expect(hex(parseTraceparent(`cc-${TRACE}-${PARENT}-01-what-comes-next`)!.traceId)).toBe(TRACE);
  });

  test("values breaking the header's rules are ignored", () => {
    const bad = [
      "",
      `ff-${TRACE}-${PARENT}-01`, // version ff
      `00-${TRACE}-${PARENT}-01-x`, // version 00 of another length
      `cc-${TRACE}-${PARENT}-01x`, // a later version, longer, without "-"
      `00-${TRACE.toUpperCase()}-${PARENT}-01`, // upper case
      `00-${"0".repeat(32)}-${PARENT}-01`, // all-zero trace id
      `00-${TRACE}-${"0".repeat(16)}-01`, // all-zero parent id
      `00-${TRACE.slice(1)}-${PARENT}-01`, // short trace id
      `00-${TRACE}-${PARENT}-1`, // short flags
      `00_${TRACE}_${PARENT}_01`, // other separators
      `0g-${TRACE}-${PARENT}-01`, // not hex
      VALID.slice(0, 40), // cut by the capture
    ];
    for (const v of bad) expect(parseTraceparent(v), v).toBeUndefined();
  });

  test("span flags: the caller's trace flags, and whether the parent is remote (OTLP SpanFlags bits 8 and 9)", () => {
    const p = parseTraceparent(VALID)!;
    expect(spanFlagsOf(p, true)).toBe(0x301);
    expect(spanFlagsOf(p, false)).toBe(0x101);
  });

  test("HTTP/1.x heads keep the header (either parser), and a header sent twice as neither", () => {
    const text = `GET /a HTTP/1.1\r\nHost: h\r\nTRACEPARENT:  ${VALID} \r\nAccept: */*`;
    const bytes = Uint8Array.from(`${text}\r\n\r\n`, (c) => c.charCodeAt(0));
    expect((parseHead(text, true)!.head as { traceparent?: string }).traceparent).toBe(VALID);
    expect((parseHeadBytes(bytes, 0, bytes.length)!.head as { traceparent?: string }).traceparent).toBe(VALID);
    const twice = `${text}\r\ntraceparent: 00-${"1".repeat(32)}-${"2".repeat(16)}-01`;
    const twiceBytes = Uint8Array.from(`${twice}\r\n\r\n`, (c) => c.charCodeAt(0));
    expect((parseHead(twice, true)!.head as { traceparent?: string }).traceparent).toBe("");
    expect((parseHeadBytes(twiceBytes, 0, twiceBytes.length)!.head as { traceparent?: string }).traceparent).toBe("");
    // Responses carry none.
    expect((parseHead(`HTTP/1.1 200 OK\r\ntraceparent: ${VALID}`, true)!.head as { traceparent?: string }).traceparent).toBeUndefined();
  });
});

const meta: EndpointMeta = { pid: 7, comm: "app", localAddress: "10.0.0.1", localPort: 8080, remoteAddress: "10.0.0.2", remotePort: 51000 };
const ctx: SpanContext = { toEpochNs: (ns) => ns, describe: () => ({ attributes: {}, resource: undefined }) };

function exchange(role: "server" | "client", traceparent: string | undefined): HttpExchange<EndpointMeta> {
  return {
    role,
    request: { kind: "request", method: "GET", target: "/a", path: "/a", version: "1.1", host: "h", complete: true, ...(traceparent === undefined ? {} : { traceparent }) },
    response: { kind: "response", status: 200, version: "1.1", complete: true },
    startNs: 1n,
    endNs: 2n,
    meta,
  };
}

describe("spans of a request that carried a traceparent", () => {
  test("a server span joins the caller's trace under the caller's span (a remote parent); a client span under its process's span", () => {
    const server = exchangeToSpan(exchange("server", VALID), ctx);
    expect([hex(server.traceId), hex(server.parentSpanId), server.flags]).toEqual([TRACE, PARENT, 0x301]);
    expect(hex(server.spanId)).not.toBe(PARENT);
    const client = exchangeToSpan(exchange("client", VALID), ctx);
    expect([hex(client.traceId), hex(client.parentSpanId), client.flags]).toEqual([TRACE, PARENT, 0x101]);
  });

  test("without one, or with one that breaks the rules, a span starts a trace of its own", () => {
    for (const tp of [undefined, "", `00-${TRACE.toUpperCase()}-${PARENT}-01`]) {
      const s = exchangeToSpan(exchange("server", tp), ctx);
      expect(s.parentSpanId).toBeUndefined();
      expect(s.flags).toBeUndefined();
      expect(hex(s.traceId)).not.toBe(TRACE);
    }
  });
});

describe("HTTP/2 streams", () => {
  interface Compressor {
    write(headers: Array<{ name: string; value: string }>): void;
    read(): Uint8Array;
  }
  const compressor = (): Compressor => (hpack as unknown as { compressor: { create(o: unknown): Compressor } }).compressor.create({ table: { size: 4096 } });
  const frame = (type: number, flags: number, stream: number, payload: Uint8Array) => {
    const f = new Uint8Array(9 + payload.length);
    f.set([(payload.length >> 16) & 0xff, (payload.length >> 8) & 0xff, payload.length & 0xff, type, flags], 0);
    new DataView(f.buffer).setUint32(5, stream);
    f.set(payload, 9);
    return f;
  };

  test("each stream keeps its own traceparent (gRPC calls too), and a stream without one has none", () => {
    const tracker = new ExchangeTracker<EndpointMeta>();
    const enc = [compressor(), compressor()];
    const off = [0, 0];
    let ts = 1n;
    const send = (io: Io, bytes: Uint8Array) => {
      const call: CapturedCall<EndpointMeta> = { connection: "c", io, timestampNs: ts++, streamOffset: off[io]!, length: bytes.length, data: bytes, meta };
      off[io]! += bytes.length;
      return tracker.push(call);
    };
    const headers = (io: Io, stream: number, h: Record<string, string>) => {
      enc[io]!.write(Object.entries(h).map(([name, value]) => ({ name, value })));
      return frame(1, 4 | 1, stream, enc[io]!.read());
    };
    const preface = new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    const req = { ":method": "POST", ":scheme": "http", ":path": "/pkg.Svc/Do", ":authority": "svc", "content-type": "application/grpc" };
    const other = `00-${"a".repeat(32)}-${"b".repeat(16)}-00`;
    send(IO_READ, new Uint8Array([...preface, ...frame(4, 0, 0, new Uint8Array(0)), ...headers(IO_READ, 1, { ...req, traceparent: VALID }), ...headers(IO_READ, 3, { ...req, traceparent: other }), ...headers(IO_READ, 5, req)]));
    const done = send(IO_WRITE, new Uint8Array([...frame(4, 0, 0, new Uint8Array(0)), ...[1, 3, 5].flatMap((id) => [...headers(IO_WRITE, id, { ":status": "200", "grpc-status": "0" })])]));
    expect(done.map((x) => x.request.traceparent)).toEqual([VALID, other, undefined]);
    const spans = done.map((x) => exchangeToSpan(x, ctx));
    expect(spans.map((s) => [s.name, hex(s.parentSpanId)])).toEqual([["pkg.Svc/Do", PARENT], ["pkg.Svc/Do", "b".repeat(16)], ["pkg.Svc/Do", undefined]]);
  });
});
