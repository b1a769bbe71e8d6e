/**
 * The encoded bytes of HTTP/1.x spans, kept identical while the span path changes: a fixed set of exchanges (server
 * and client roles, IPv4 and IPv6, query redaction, route templates, unknown methods, truncated request lines, HEAD,
 * chunked and until-close bodies, pipelining, 1xx, TLS plaintext, process and workload labels) goes through the real
 * path (record decoding, the network component, the pipeline's encoder), and every span is decoded with protobufjs
 * from the official protos. Its fields, with the random ids numbered and the times taken from the first span's
 * start, must equal span-bytes.golden.json, and its bytes must be what protobufjs encodes for the decoded message
 * (so the golden fields determine the bytes: nothing is written that the decoded fields do not show).
 * SPAN_BYTES_GOLDEN=write rewrites the golden file (only for an intended change of the spans).
 */
import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { NetworkCollector } from "../../../../../src/collectors/network/component";
import { decodeHttpEvent } from "../../../../../src/collectors/network/decoders";
import type { TlsEvent } from "../../../../../src/collectors/tls/decoder";
import { EbpfCore, NATIVE_DEPS } from "../../../../../src/ebpf";
import { ProcessTable, type ProcSource } from "../../../../../src/ebpf/process-table";
import { ItemEncoder } from "../../../../../src/export/encode";
import type { SpanItem } from "../../../../../src/export/model";
import { ResourceBuilder } from "../../../../../src/export/resource";
import { otlpRoot } from "../../../../../src/export/schema";
import { fakeContext } from "../../../../helpers/fakes/collectors";
import { httpRecord } from "../records";

const GOLDEN = new URL("./span-bytes.golden.json", import.meta.url).pathname;

const CONTAINER = "4f5c1a7e9b2d3c8e0f6a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6";
/** Two processes the table knows: 42 runs /usr/bin/shop-server in a container, 43 /usr/local/bin/curl on the host. */
const PROC: ProcSource = {
  cgroupPath: (pid) => (pid === 42 ? `0::/system.slice/docker-${CONTAINER}.scope\n` : pid === 43 ? "0::/user.slice/user-1000.slice\n" : undefined),
  exe: (pid) => (pid === 42 ? "/usr/bin/shop-server" : pid === 43 ? "/usr/local/bin/curl" : undefined),
  stat: (pid) => (pid === 42 || pid === 43 ? { ppid: 1, comm: pid === 42 ? "shop-server" : "curl", uid: 0 } : undefined),
  pids: () => [42, 43],
};
const WORKLOAD_42 = { "service.name": "shop", "k8s.namespace.name": "prod", "k8s.pod.name": "shop-7d9f" };

const CONFIG = `
agent:
  ebpf:
    enabled: false
    network:
      max_spans_per_second: 1000
      http_routes: ["/api/items/{id}", "/api/users/{user}/orders"]
`;

const V4_LOCAL = [10, 0, 0, 1];
const V4_PEER = [10, 0, 0, 9];
const V6_LOCAL = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6_PEER = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0x0b];

interface Call {
  /** Connection (socket) number. */
  sk: number;
  pid: number;
  io: 0 | 1;
  data: string;
  /** Bytes the call moved when more than were captured (data). */
  len?: number;
  v6?: boolean;
  sport?: number;
  dport?: number;
}

/** The calls, in order; each connection's offsets per direction follow from the calls before. */
const CALLS: Call[] = [
  // Server, GET with query, Host with port, User-Agent, a body of known length (the benchmark's exchange).
  { sk: 1, pid: 42, io: 0, data: "GET /api/items/1234?view=full&page=2 HTTP/1.1\r\nHost: shop.local:8080\r\nUser-Agent: wrk/4.2\r\nAccept: application/json\r\nTraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\r\n" },
  { sk: 1, pid: 42, io: 1, data: 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\nDate: Wed, 25 Nov 2026 10:00:00 GMT\r\n\r\n{"id":1234,"ok":1}' },
  // The same connection again: keep-alive, a route template with two segments, a 500 with a chunked body.
  { sk: 1, pid: 42, io: 0, data: "POST /api/users/u-7/orders HTTP/1.1\r\nHost: shop.local\r\nContent-Length: 5\r\n\r\nhello" },
  { sk: 1, pid: 42, io: 1, data: "HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n5\r\noops!\r\n" },
  { sk: 1, pid: 42, io: 1, data: "0\r\n\r\n" },
  // Server, an unknown method (_OTHER), no Host, HTTP/1.0, 404 (not an error for a server).
  { sk: 2, pid: 42, io: 0, data: "PROPFIND /dav/ HTTP/1.0\r\nDepth: 1\r\n\r\n", sport: 8080, dport: 40002 },
  { sk: 2, pid: 42, io: 1, data: "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n", sport: 8080, dport: 40002 },
  // Server, HEAD: the response's Content-Length announces no body.
  { sk: 3, pid: 42, io: 0, data: "HEAD /health?sig=s3cr3t HTTP/1.1\r\nHost: [fd00::1]:9090\r\nUser-Agent: kube-probe/1.30\r\n\r\n" },
  { sk: 3, pid: 42, io: 1, data: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" },
  // Server, a request line longer than what was captured: truncated "url".
  { sk: 4, pid: 42, io: 0, data: "GET /api/items/99?q=aaaaaaaaaaaaaaaaaaaa", len: 600 },
  { sk: 4, pid: 42, io: 1, data: "HTTP/1.1 204 No Content\r\n\r\n" },
  // Server, two pipelined requests in one read, 100 Continue then the answers in one write; IPv6.
  { sk: 5, pid: 42, io: 0, data: "GET /a HTTP/1.1\r\nHost: v6.local\r\n\r\nGET /b?x=1&y HTTP/1.1\r\nHost: v6.local\r\n\r\n", v6: true },
  { sk: 5, pid: 42, io: 1, data: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n", v6: true },
  // Client, absolute-form target with user info and a query, 404 (an error for a client).
  { sk: 6, pid: 43, io: 1, data: "GET http://user:pw@api.example.com:8081/v1/things?id=5#frag HTTP/1.1\r\nHost: api.example.com:8081\r\nUser-Agent: curl/8.5.0\r\n\r\n", sport: 51000, dport: 8081 },
  { sk: 6, pid: 43, io: 0, data: "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found", sport: 51000, dport: 8081 },
  // Client, origin-form without Host on IPv6, peer port 80, response until the connection closes.
  { sk: 7, pid: 43, io: 1, data: "DELETE /v1/things/5 HTTP/1.1\r\n\r\n", v6: true, sport: 51001, dport: 80 },
  { sk: 7, pid: 43, io: 0, data: "HTTP/1.1 301 Moved Permanently\r\nLocation: /v2\r\nConnection: close\r\n\r\nmoved", v6: true, sport: 51001, dport: 80 },
  // Client, CONNECT through a proxy.
  { sk: 8, pid: 43, io: 1, data: "CONNECT db.internal:5432 HTTP/1.1\r\nHost: db.internal:5432\r\n\r\n", sport: 51002, dport: 3128 },
  { sk: 8, pid: 43, io: 0, data: "HTTP/1.1 200 Connection established\r\n\r\n", sport: 51002, dport: 3128 },
  // A process the table does not know (task name only, no workload resource).
  { sk: 9, pid: 77, io: 0, data: "GET /x HTTP/1.1\r\nHost: other\r\n\r\n" },
  { sk: 9, pid: 77, io: 1, data: "HTTP/1.1 302 Found\r\nContent-Length: 0\r\n\r\n" },
];

/** TLS plaintext (url.scheme https): a client call pair on an SSL object. */
function tlsEvent(io: 0 | 1, offset: number, data: string, ts: bigint): TlsEvent {
  const bytes = new TextEncoder().encode(data);
  return {
    type: "tls", timestampNs: ts, ssl: 0x5555_0000n, streamOffset: offset, sk: 0n, cgroupId: 0n, pid: 43, tid: 43, length: bytes.length, io,
    socketKnown: true, localAddress: "10.0.0.1", localPort: 51003, remoteAddress: "10.0.0.9", remotePort: 443, family: 2, comm: "curl", data: bytes,
  } as TlsEvent;
}

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

/** The spans the fixed calls produce, in the order submitted. */
async function produce(): Promise<SpanItem[]> {
  const ctx = fakeContext(CONFIG, undefined, { 42: WORKLOAD_42 });
  const processes = new ProcessTable(PROC);
  processes.seed();
  const core = new EbpfCore(ctx, NATIVE_DEPS, processes);
  const collector = new NetworkCollector(ctx, core, 999);
  const offsets = new Map<string, number>();
  let ts = 1_000_000n;
  for (const c of CALLS) {
    const key = `${c.sk}:${c.io}`;
    const off = offsets.get(key) ?? 0;
    const len = c.len ?? new TextEncoder().encode(c.data).length;
    offsets.set(key, off + len);
    ts += 7_919n;
    const v = httpRecord({
      ts, sk: 0xffff_8880_0000_0000n + BigInt(c.sk * 4096), off, pid: c.pid, len, io: c.io, sport: c.sport ?? 8080, dport: c.dport ?? 40_000 + c.sk,
      family: c.v6 ? 10 : 2, saddr: c.v6 ? V6_LOCAL : V4_LOCAL, daddr: c.v6 ? V6_PEER : V4_PEER, comm: c.pid === 42 ? "shop-server" : c.pid === 43 ? "curl" : "worker-77", data: c.data,
    });
    collector.handle(decodeHttpEvent(v, 0, v.byteLength));
  }
  const req = "GET /pay?card=1 HTTP/1.1\r\nHost: pay.example.com\r\n\r\n";
  collector.handleTls(tlsEvent(1, 0, req, (ts += 1000n)));
  collector.handleTls(tlsEvent(0, 0, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n", (ts += 5000n)));
  await Promise.resolve();
  /* The response delimited by the close ends at shutdown. */
  await collector.shutdown(AbortSignal.timeout(1000));
  return ctx.pipeline.accepted.traces;
}

const root = otlpRoot();
const SpanType = root.lookupType("opentelemetry.proto.trace.v1.Span");

describe("HTTP/1.x span bytes", () => {
  test("the fixed exchanges give the golden spans, byte for byte apart from the ids and times", async () => {
    const spans = await produce();
    const encoder = new ItemEncoder(new ResourceBuilder("unit").encoder);
    const ids = new Set<string>();
    const first = spans.length > 0 ? spans.reduce((m, s) => (s.startTimeUnixNano < m ? s.startTimeUnixNano : m), spans[0]!.startTimeUnixNano) : 0n;
    const out = spans.map((s, i) => {
      const bytes = encoder.encode("traces", s).bytes.slice();
      const message = SpanType.decode(bytes);
      /* Nothing written that the decoded message does not hold (field order, defaults, varint forms). */
      expect(hex(SpanType.encode(message).finish()), `span ${i} is canonical`).toBe(hex(bytes));
      const o = SpanType.toObject(message, { longs: String, enums: String, bytes: String, defaults: false, arrays: true }) as Record<string, unknown>;
      expect(Buffer.from(o.traceId as string, "base64")).toHaveLength(16);
      expect(Buffer.from(o.spanId as string, "base64")).toHaveLength(8);
      ids.add(`${o.traceId}/${o.spanId}`);
      /* Random ids are named by position; a trace id from a request's traceparent is kept (the caller's trace). */
      if (o.parentSpanId === undefined) o.traceId = `trace-${i}`;
      o.spanId = `span-${i}`;
      o.startTimeUnixNano = String(BigInt(o.startTimeUnixNano as string) - first);
      o.endTimeUnixNano = String(BigInt(o.endTimeUnixNano as string) - first);
      return { span: o, bytes: bytes.length, scope: s.scope ?? null, resource: s.resource ?? null };
    });
    expect(ids.size).toBe(spans.length);
    if (process.env.SPAN_BYTES_GOLDEN === "write") writeFileSync(GOLDEN, `${JSON.stringify(out, null, 1)}\n`);
    const golden = JSON.parse(readFileSync(GOLDEN, "utf8"));
    expect(out).toHaveLength(12);
    expect(out).toEqual(golden);
  });
});
