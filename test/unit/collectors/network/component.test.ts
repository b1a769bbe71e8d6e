import { describe, expect, test } from "bun:test";
import { NetworkCollector } from "../../../../src/collectors/network/component";
import { decodeConnEvent, decodeHttpEvent, decodeHttpEventReused, ConnKind, Direction, HTTP_EVENT_HEADER_BYTES, HttpEventFlag } from "../../../../src/collectors/network/decoders";
import { fakeContext, recordingHost } from "../../../helpers/fakes/collectors";
import { connRecord, httpRecord } from "./records";

const YAML = (spans: number) => `
agent:
  ebpf:
    enabled: false
    network:
      max_spans_per_second: ${spans}
`;

const lo = [127, 0, 0, 1];
const http = (pid: number, io: number, off: number, data: string, ts: bigint) => {
  const v = httpRecord({ ts, sk: 5n, off, pid, len: data.length, io, sport: 8080, dport: 50000, family: 2, saddr: lo, daddr: lo, comm: "srv", data });
  return decodeHttpEvent(v, 0, v.byteLength);
};

describe("ebpf/network component over decoded records", () => {
  test("a request read and its response written become one SERVER span; the agent's own pid is ignored", async () => {
    const ctx = fakeContext(YAML(100));
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    const req = "GET /x?y=1 HTTP/1.1\r\nHost: svc.local:8080\r\n\r\n";
    const res = "HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\n\r\n";
    c.handle(http(42, 0, 0, req, 1_000n));
    c.handle(http(42, 1, 0, res, 9_000n));
    c.handle(http(999, 0, 0, req, 1_000n));
    c.handle(http(999, 1, 0, res, 9_000n));
    await Promise.resolve();
    const spans = ctx.pipeline.accepted.traces;
    expect(spans).toHaveLength(1);
    expect(spans[0]!.kind).toBe(2);
    expect(spans[0]!.endTimeUnixNano - spans[0]!.startTimeUnixNano).toBe(8_000n);
    expect(spans[0]!.attributes).toMatchObject({ "http.request.method": "GET", "url.path": "/x", "http.response.status_code": 503, "server.address": "svc.local", "server.port": 8080, "client.port": 50000, "error.type": "503" });
  });

  test("both ends of a loopback connection traced: the server's span is the child of the client's, in its trace", async () => {
    const ctx = fakeContext(YAML(100));
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    const req = "GET /linked HTTP/1.1\r\nHost: svc\r\n\r\n";
    const res = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    // Two live processes of one network namespace (loopback connections are matched within one): this one serves,
    // its parent is the client.
    const [serverPid, clientPid] = [process.pid, process.ppid];
    const record = (pid: number, sk: bigint, io: number, sport: number, dport: number, data: string, ts: bigint) => {
      const v = httpRecord({ ts, sk, off: 0, pid, len: data.length, io, sport, dport, family: 2, saddr: lo, daddr: lo, comm: pid === serverPid ? "srv" : "cli", data });
      return decodeHttpEvent(v, 0, v.byteLength);
    };
    // The client writes, the server reads and answers, the client reads: one ring's order.
    c.handle(record(clientPid, 7n, 1, 50000, 8080, req, 1_000n));
    c.handle(record(serverPid, 5n, 0, 8080, 50000, req, 2_000n));
    c.handle(record(serverPid, 5n, 1, 8080, 50000, res, 3_000n));
    await Promise.resolve();
    // The server's span waits for the client's ...
    expect(ctx.pipeline.accepted.traces).toEqual([]);
    c.handle(record(clientPid, 7n, 0, 50000, 8080, res, 4_000n));
    await Promise.resolve();
    // ... and goes with it, its child.
    const spans = ctx.pipeline.accepted.traces;
    const client = spans.find((s) => s.kind === 3)!;
    const server = spans.find((s) => s.kind === 2)!;
    expect(spans).toHaveLength(2);
    expect([server.traceId, server.parentSpanId, server.flags]).toEqual([client.traceId, client.spanId, 0x300]);
    expect(client.parentSpanId).toBeUndefined();
  });

  test("one socket address in two processes is two connections (the connection key follows the pid)", async () => {
    const ctx = fakeContext(YAML(100));
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    const req = (path: string) => `GET ${path} HTTP/1.1\r\nHost: h\r\n\r\n`;
    const res = (status: number) => `HTTP/1.1 ${status} X\r\nContent-Length: 0\r\n\r\n`;
    /* Interleaved: 42's request, 43's request on the same sk, then their responses in the other order. */
    c.handle(http(42, 0, 0, req("/p42"), 1_000n));
    c.handle(http(43, 0, 0, req("/p43"), 2_000n));
    c.handle(http(43, 1, 0, res(201), 3_000n));
    c.handle(http(42, 1, 0, res(202), 4_000n));
    c.handle(http(42, 0, req("/p42").length, req("/again"), 5_000n));
    c.handle(http(42, 1, res(202).length, res(203), 6_000n));
    await Promise.resolve();
    expect(ctx.pipeline.accepted.traces.map((s) => [s.attributes!["process.pid"], s.attributes!["url.path"], s.attributes!["http.response.status_code"]])).toEqual([
      [43, "/p43", 201],
      [42, "/p42", 202],
      [42, "/again", 203],
    ]);
  });

  test("http_routes and http_query_redaction shape the spans, and a reload changes them", async () => {
    const yaml = (routes: string, redaction: string) => `
agent:
  ebpf:
    enabled: false
    network:
      http_routes: ${routes}
      http_query_redaction: ${redaction}
`;
    const ctx = fakeContext(yaml(`["/items/{item}"]`, "all"));
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    const exchange = (sk: number, ts: bigint) => {
      for (const [io, data] of [[0, "GET /items/7?sig=abc&x=1 HTTP/1.1\r\nHost: shop\r\n\r\n"], [1, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"]] as const) {
        const v = httpRecord({ ts, sk: BigInt(sk), off: 0, pid: 42, len: data.length, io, sport: 8080, dport: 50000 + sk, family: 2, saddr: lo, daddr: lo, comm: "srv", data });
        c.handle(decodeHttpEvent(v, 0, v.byteLength));
      }
    };
    exchange(1, 1_000n);
    const next = fakeContext(yaml("[]", "sensitive")).config;
    await c.reload(next, ctx.config);
    exchange(2, 2_000n);
    await Promise.resolve();
    expect(ctx.pipeline.accepted.traces.map((s) => [s.name, s.attributes!["http.route"], s.attributes!["url.query"]])).toEqual([
      ["GET /items/{item}", "/items/{item}", "sig=REDACTED&x=REDACTED"],
      // No template any more: the heuristic route its RED series has.
      ["GET /items/{id}", "/items/{id}", "sig=REDACTED&x=1"],
    ]);
  });

  test("records decoded in place: the span comes from the bytes as they were handled, which the records let go of", async () => {
    const ctx = fakeContext(YAML(100));
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    const records = [
      [0, "GET /in-place HTTP/1.1\r\nHost: svc\r\n\r\n", 1_000n],
      [1, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n", 5_000n],
    ] as const;
    for (const [io, data, ts] of records) {
      const v = httpRecord({ ts, sk: 5n, off: 0, pid: 42, len: data.length, io, sport: 8080, dport: 50000, family: 2, saddr: lo, daddr: lo, comm: "srv", data });
      const e = decodeHttpEventReused(v, 0, v.byteLength);
      c.handle(e);
      expect(e.data.length).toBe(0);
      /* The ring reuses the memory. */
      new Uint8Array(v.buffer).fill(0x58, HTTP_EVENT_HEADER_BYTES);
    }
    await Promise.resolve();
    expect(ctx.pipeline.accepted.traces.map((s) => [s.name, s.attributes!["url.path"], s.attributes!["http.response.status_code"]])).toEqual([["GET /in-place", "/in-place", 201]]);
  });

  test("sockets whose addresses differ in the high word only are different connections", async () => {
    const ctx = fakeContext(YAML(100));
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    const low = 0x1234_5678n;
    /* Bit 56 apart: the same low 53 bits. Requests on both, then both responses. */
    const sks = [(0xffff_8888n << 32n) | low, (0xfeff_8888n << 32n) | low];
    const calls = [[0, 0, "GET /a HTTP/1.1\r\n\r\n", 1_000n], [1, 0, "GET /b HTTP/1.1\r\n\r\n", 1_500n], [0, 1, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 2_000n], [1, 1, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", 2_500n]] as const;
    for (const [which, io, data, ts] of calls) {
      const v = httpRecord({ ts, sk: sks[which]!, off: 0, pid: 42, len: data.length, io, sport: 8080, dport: 50000, family: 2, saddr: lo, daddr: lo, comm: "srv", data });
      c.handle(decodeHttpEventReused(v, 0, v.byteLength));
    }
    await Promise.resolve();
    expect(ctx.pipeline.accepted.traces.map((s) => [s.attributes!["url.path"], s.attributes!["http.response.status_code"]])).toEqual([["/a", 200], ["/b", 404]]);
  });

  test("a request head that does not parse is a span drop counted as http_unparsed; an unanswered request at close as http_unanswered", async () => {
    const ctx = fakeContext(YAML(100));
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    c.handle(http(42, 0, 0, "GET /x HTTP/7.7\r\n\r\n", 1_000n));
    const v = httpRecord({ ts: 2_000n, sk: 6n, off: 0, pid: 42, len: 20, io: 0, sport: 8080, dport: 50001, family: 2, saddr: lo, daddr: lo, comm: "srv", data: "GET /y HTTP/1.1\r\n\r\n" });
    c.handle(decodeHttpEvent(v, 0, v.byteLength));
    const closed = connRecord({ kind: ConnKind.CLOSED, ts: 3_000n, sk: 6n, start: 1n, est: 1n, sent: 0, recv: 20, pid: 42, retrans: 0, sport: 8080, dport: 50001, family: 2, dir: Direction.INBOUND, flags: 0, saddr: lo, daddr: lo, comm: "srv" });
    c.handle(decodeConnEvent(closed, 0, closed.byteLength));
    await c.shutdown(AbortSignal.timeout(1000));
    const text = await ctx.metrics.registry.metrics();
    expect(text).toMatch(/svc_spans_dropped_total\{reason="http_unparsed"\} 1/);
    expect(text).toMatch(/svc_spans_dropped_total\{reason="http_unanswered"\} 1/);
  });

  test("an HTTP/2 connection the kernel stopped forwarding (its record limit) counts its two directions as rate_limit drops", async () => {
    const ctx = fakeContext(YAML(100));
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    const opening = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\u0000\u0000\u0000\u0004\u0000\u0000\u0000\u0000\u0000";
    c.handle(http(42, 0, 0, opening, 1_000n));
    const v = httpRecord({ ts: 2_000n, sk: 5n, off: opening.length, pid: 42, len: 300, io: 0, sport: 8080, dport: 50000, family: 2, saddr: lo, daddr: lo, comm: "srv", data: "", flags: HttpEventFlag.H2_STOPPED });
    c.handle(decodeHttpEvent(v, 0, v.byteLength));
    await c.shutdown(AbortSignal.timeout(1000));
    const text = await ctx.metrics.registry.metrics();
    expect(text).toMatch(/svc_spans_dropped_total\{reason="rate_limit"\} 2/);
    expect(text).toMatch(/svc_spans_dropped_total\{reason="http2_state_lost"\} 0/);
  });

  test("HTTP/2 streams over max_spans_per_second are counted and their objects reused; the spans made keep their own", async () => {
    const ctx = fakeContext(YAML(2));
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    const frame = (type: number, flags: number, stream: number, payload: number[]) => [(payload.length >> 16) & 0xff, (payload.length >> 8) & 0xff, payload.length & 0xff, type, flags, 0, 0, 0, stream, ...payload];
    /* HPACK: indexed :method GET (0x82), :scheme http (0x86); :path as a literal without indexing (0x04); :status 200/204/404 indexed. */
    const path = (p: string) => [0x04, p.length, ...[...p].map((ch) => ch.charCodeAt(0))];
    const statusOf = [0x88, 0x89, 0x8d];
    const off = [0, 0];
    const send = (io: number, bytes: number[], ts: bigint) => {
      const v = httpRecord({ ts, sk: 5n, off: off[io]!, pid: 42, len: bytes.length, io, sport: 8080, dport: 50000, family: 2, saddr: lo, daddr: lo, comm: "srv", data: Uint8Array.from(bytes) });
      off[io]! += bytes.length;
      c.handle(decodeHttpEvent(v, 0, v.byteLength));
    };
    const settings = frame(4, 0, 0, []);
    send(0, [...new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), ...settings], 1_000n);
    send(1, settings, 1_100n);
    for (let i = 0; i < 8; i++) {
      const stream = 1 + 2 * i;
      send(0, frame(1, 0x5, stream, [0x82, 0x86, ...path(`/s${stream}`)]), 2_000n + BigInt(i) * 100n);
      send(1, frame(1, 0x5, stream, [statusOf[i % 3]!]), 2_050n + BigInt(i) * 100n);
    }
    await Promise.resolve();
    /* Two spans (the budget), the others counted as rate_limit; the spans' exchanges were not reused by later streams. */
    expect(ctx.pipeline.accepted.traces.map((s) => [s.attributes!["url.path"], s.attributes!["http.response.status_code"]])).toEqual([
      ["/s1", 200],
      ["/s3", 204],
    ]);
    expect(c.counters.dropped).toBe(6);
  });

  test("spans over max_spans_per_second are dropped and counted as rate_limit", async () => {
    const ctx = fakeContext(YAML(2));
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    for (let i = 0; i < 5; i++) {
      const v = connRecord({ kind: ConnKind.FAILED, ts: 10n, sk: BigInt(i + 1), start: 1n, est: 0n, sent: 0, recv: 0, pid: 7, retrans: 0, sport: 40000 + i, dport: 9, family: 2, dir: Direction.OUTBOUND, flags: 0, saddr: lo, daddr: lo, comm: "c" });
      c.handle(decodeConnEvent(v, 0, v.byteLength));
    }
    await Promise.resolve();
    expect(ctx.pipeline.accepted.traces).toHaveLength(2);
    expect(c.counters.dropped).toBe(3);
    const text = await ctx.metrics.registry.metrics();
    expect(text).toMatch(/svc_spans_dropped_total\{reason="rate_limit"\} 3/);
    expect(c.exportMetrics()).toBeGreaterThan(0);
    expect(ctx.pipeline.accepted.metrics.filter((p) => p.name === "network.tcp.connections.failed").reduce((s, p) => s + (p.type === "sum" ? p.value : 0), 0)).toBe(5);
  });

  test("a flush takes the interval's connection metrics at once", async () => {
    const ctx = fakeContext(YAML(100));
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    await c.start(recordingHost());
    for (let i = 0; i < 3; i++) {
      const v = connRecord({ kind: ConnKind.FAILED, ts: 10n, sk: BigInt(i + 1), start: 1n, est: 0n, sent: 0, recv: 0, pid: 7, retrans: 0, sport: 40000 + i, dport: 9, family: 2, dir: Direction.OUTBOUND, flags: 0, saddr: lo, daddr: lo, comm: "c" });
      c.handle(decodeConnEvent(v, 0, v.byteLength));
    }
    const failed = () => ctx.pipeline.accepted.metrics.filter((p) => p.name === "network.tcp.connections.failed").reduce((s, p) => s + (p.type === "sum" ? p.value : 0), 0);
    expect(failed()).toBe(0);
    await ctx.pipeline.flush();
    expect(failed()).toBe(3);
    expect(ctx.pipeline.accepted.traces).toHaveLength(3);
    await c.shutdown(AbortSignal.timeout(1000));
    expect(ctx.pipeline.flushSources.size).toBe(0);
  });
});
