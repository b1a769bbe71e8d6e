/**
 * HTTP/2 exchanges from frame bytes: header blocks encoded by hpack.js's compressor (Huffman strings, dynamic
 * table entries reused across blocks), fed through ExchangeTracker as the kernel would forward them.
 */
import { describe, expect, test } from "bun:test";
import hpack from "hpack.js";
import { ExchangeTracker, IO_READ, IO_WRITE, type CapturedCall, type Io } from "../../../../../src/collectors/network/http/exchanges";
import { MAX_OPEN_STREAMS, grpcNames, grpcTimeoutNs, h2FrameAt, isH2Opening } from "../../../../../src/collectors/network/http/h2";
import { STATUS_RESET, STATUS_UNKNOWN } from "../../../../../src/collectors/network/http/parser";

const PREFACE = new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

interface Compressor {
  write(headers: Array<{ name: string; value: string }>): void;
  read(): Uint8Array;
}
const newCompressor = (): Compressor => (hpack as unknown as { compressor: { create(o: unknown): Compressor } }).compressor.create({ table: { size: 4096 } });

function frame(type: number, flags: number, stream: number, payload: Uint8Array): Uint8Array {
  const f = new Uint8Array(9 + payload.length);
  f[0] = (payload.length >> 16) & 0xff;
  f[1] = (payload.length >> 8) & 0xff;
  f[2] = payload.length & 0xff;
  f[3] = type;
  f[4] = flags;
  new DataView(f.buffer).setUint32(5, stream);
  f.set(payload, 9);
  return f;
}
const cat = (...parts: Uint8Array[]) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
};
const settings = () => frame(4, 0, 0, new Uint8Array(6));
const END_STREAM = 1;
const END_HEADERS = 4;

/** A server-side view: the process reads requests (IO_READ) and writes responses (IO_WRITE). */
class Conn {
  readonly tracker = new ExchangeTracker<string>();
  readonly enc: [Compressor, Compressor] = [newCompressor(), newCompressor()];
  readonly off = [0, 0];
  ts = 1n;

  send(io: Io, bytes: Uint8Array, opts: { captured?: number } = {}) {
    const call: CapturedCall<string> = { connection: "c", io, timestampNs: this.ts++, streamOffset: this.off[io]!, length: bytes.length, data: bytes.subarray(0, opts.captured ?? bytes.length), meta: "m" };
    this.off[io]! += bytes.length;
    return this.tracker.push(call);
  }

  headers(io: Io, stream: number, h: Record<string, string>, flags = END_HEADERS): Uint8Array {
    this.enc[io].write(Object.entries(h).map(([name, value]) => ({ name, value })));
    return frame(1, flags, stream, this.enc[io].read());
  }
}

describe("HTTP/2 exchanges", () => {
  test("preface and SETTINGS open HTTP/2; HTTP/1 does not", () => {
    expect(isH2Opening(PREFACE)).toBe(true);
    expect(isH2Opening(settings())).toBe(true);
    expect(isH2Opening(new TextEncoder().encode("GET / HTTP/1.1\r\n"))).toBe(false);
    expect(grpcNames("/pkg.Svc/Do")).toEqual({ service: "pkg.Svc", method: "Do" });
    expect(grpcNames("/a/b/c")).toBeUndefined();
    expect(["1S", "100m", "5u", "7n", "2M", "1H", "123456789S", "1s", "S", "-1m"].map(grpcTimeoutNs)).toEqual([1_000_000_000n, 100_000_000n, 5_000n, 7n, 120_000_000_000n, 3_600_000_000_000n, undefined, undefined, undefined, undefined]);
  });

  test("multiplexed streams pair by stream id, answered out of order, ending at END_STREAM (dynamic table reused)", () => {
    const c = new Conn();
    expect(c.send(IO_WRITE, settings())).toEqual([]);
    const req = (id: number, path: string) => c.headers(IO_READ, id, { ":method": "GET", ":scheme": "http", ":path": path, ":authority": "svc:8080", "x-trace": "same-value-each-time" }, END_HEADERS | END_STREAM);
    expect(c.send(IO_READ, cat(PREFACE, settings(), req(1, "/a?q=1"), req(3, "/b"), req(5, "/c")))).toEqual([]);
    const r3 = c.send(IO_WRITE, cat(c.headers(IO_WRITE, 3, { ":status": "404" }, END_HEADERS | END_STREAM)));
    expect(r3.map((x) => [x.role, x.request.method, x.request.path, x.request.target, x.request.host, x.response.status, x.request.version])).toEqual([["server", "GET", "/b", "/b", "svc:8080", 404, "2"]]);
    /* HEADERS then DATA: the exchange ends with the DATA frame carrying END_STREAM. */
    expect(c.send(IO_WRITE, c.headers(IO_WRITE, 1, { ":status": "200", "content-type": "text/plain" }))).toEqual([]);
    const r1 = c.send(IO_WRITE, cat(frame(0, 0, 1, new Uint8Array(10)), frame(0, END_STREAM, 1, new Uint8Array(5)), c.headers(IO_WRITE, 5, { ":status": "200", "content-type": "text/plain" }, END_HEADERS | END_STREAM)));
    expect(r1.map((x) => [x.request.path, x.response.status, x.endNs])).toEqual([["/a", 200, 5n], ["/c", 200, 5n]]);
    expect(r1[0]!.startNs).toBe(2n);
  });

  test("gRPC: content-type application/grpc, status from the trailers; a client's view pairs the same way", () => {
    const c = new Conn();
    /* The client writes the request (IO_WRITE) and reads the response. */
    c.send(IO_WRITE, cat(PREFACE, settings(), c.headers(IO_WRITE, 1, { ":method": "POST", ":scheme": "http", ":path": "/pkg.v1.Greeter/Hello", ":authority": "127.0.0.1:5000", "content-type": "application/grpc", te: "trailers" }), frame(0, END_STREAM, 1, new Uint8Array(12))));
    c.send(IO_READ, cat(settings(), c.headers(IO_READ, 1, { ":status": "200", "content-type": "application/grpc" }), frame(0, 0, 1, new Uint8Array(7))));
    const done = c.send(IO_READ, c.headers(IO_READ, 1, { "grpc-status": "5", "grpc-message": "not found" }, END_HEADERS | END_STREAM));
    expect(done).toHaveLength(1);
    expect(done[0]!.role).toBe("client");
    expect(done[0]!.rpc).toEqual({ system: "grpc", service: "pkg.v1.Greeter", method: "Hello", statusCode: 5 });
  });

  test("bytes the kernel did not forward: a DATA payload is skipped exactly; a header block lost stops the direction, counted", () => {
    const c = new Conn();
    c.send(IO_READ, cat(PREFACE, settings(), c.headers(IO_READ, 1, { ":method": "POST", ":path": "/up", ":scheme": "http" })));
    /* 5000 bytes of DATA of which only the frame header and 100 bytes were forwarded. */
    c.send(IO_READ, frame(0, END_STREAM, 1, new Uint8Array(5000)), { captured: 109 });
    c.send(IO_WRITE, settings());
    expect(c.send(IO_WRITE, c.headers(IO_WRITE, 1, { ":status": "200" }, END_HEADERS | END_STREAM)).map((x) => x.response.status)).toEqual([200]);
    expect(c.tracker.h2Counters.lostDirections).toBe(0);
    /* A request header block cut: that direction decodes nothing more (HPACK state unknown), never guesses. */
    c.send(IO_READ, c.headers(IO_READ, 3, { ":method": "GET", ":path": "/lost", ":scheme": "http" }, END_HEADERS | END_STREAM), { captured: 12 });
    expect(c.tracker.h2Counters.lostDirections).toBe(1);
    c.send(IO_READ, c.headers(IO_READ, 5, { ":method": "GET", ":path": "/after", ":scheme": "http" }, END_HEADERS | END_STREAM));
    expect(c.send(IO_WRITE, c.headers(IO_WRITE, 5, { ":status": "200" }, END_HEADERS | END_STREAM))).toEqual([]);
    expect(c.tracker.h2Counters.lostDirections).toBe(1);
  });

  test("a connection seen after its start is not decoded; open streams are bounded and counted; close counts the rest", () => {
    const late = new ExchangeTracker<string>();
    const bytes = frame(1, END_HEADERS, 1, new Uint8Array([0x82]));
    expect(late.push({ connection: "x", io: IO_READ, timestampNs: 1n, streamOffset: 500, length: bytes.length, data: bytes, meta: "m" })).toEqual([]);
    const c = new Conn();
    c.send(IO_READ, cat(PREFACE, settings()));
    for (let id = 1; id < 2 * (MAX_OPEN_STREAMS + 10); id += 2) c.send(IO_READ, c.headers(IO_READ, id, { ":method": "GET", ":path": `/s${id}`, ":scheme": "http" }, END_HEADERS | END_STREAM));
    expect(c.tracker.h2Counters.unanswered).toBe(10);
    c.tracker.close("c");
    expect(c.tracker.h2Counters.unanswered).toBe(MAX_OPEN_STREAMS + 10);
    expect(c.tracker.size).toBe(0);
  });

  test("a long-lived stream stays open while thousands of short ones come and go beside it; ids far apart share no slot", () => {
    const c = new Conn();
    c.send(IO_READ, cat(PREFACE, settings()));
    c.send(IO_READ, c.headers(IO_READ, 1, { ":method": "POST", ":path": "/pkg.Svc/Watch", ":scheme": "http" }, END_HEADERS));
    c.send(IO_WRITE, c.headers(IO_WRITE, 1, { ":status": "200" }, END_HEADERS));
    let done = 0;
    for (let id = 3; id < 3 + 2 * 3000; id += 2) {
      c.send(IO_READ, c.headers(IO_READ, id, { ":method": "GET", ":path": "/unary", ":scheme": "http" }, END_HEADERS | END_STREAM));
      done += c.send(IO_WRITE, c.headers(IO_WRITE, id, { ":status": "200" }, END_HEADERS | END_STREAM)).length;
    }
    expect(done).toBe(3000);
    // Stream 1 ends after 3,000 others (its slot taken by ids 513, 1025, ...): still known, and answered.
    const last = c.send(IO_WRITE, frame(0, END_STREAM, 1, new Uint8Array(0)));
    expect(last.map((x) => [x.request.path, x.response.status])).toEqual([["/pkg.Svc/Watch", 200]]);
    expect(c.tracker.h2Counters.unanswered).toBe(0);
    // Ids 512 apart share a slot of the largest table: both kept (one moved beside it), each answered for itself.
    c.send(IO_READ, c.headers(IO_READ, 7001, { ":method": "GET", ":path": "/a", ":scheme": "http" }, END_HEADERS | END_STREAM));
    c.send(IO_READ, c.headers(IO_READ, 7001 + 512, { ":method": "GET", ":path": "/b", ":scheme": "http" }, END_HEADERS | END_STREAM));
    const b = c.send(IO_WRITE, c.headers(IO_WRITE, 7001 + 512, { ":status": "404" }, END_HEADERS | END_STREAM));
    const a = c.send(IO_WRITE, c.headers(IO_WRITE, 7001, { ":status": "500" }, END_HEADERS | END_STREAM));
    expect([...b, ...a].map((x) => [x.request.path, x.response.status])).toEqual([["/b", 404], ["/a", 500]]);
    c.tracker.close("c");
    expect(c.tracker.h2Counters.unanswered).toBe(0);
  });

  test("RST_STREAM before a response ends the stream unanswered (counted); CONTINUATION frames join a header block", () => {
    const c = new Conn();
    c.send(IO_READ, cat(PREFACE, settings()));
    c.send(IO_READ, c.headers(IO_READ, 1, { ":method": "GET", ":path": "/reset", ":scheme": "http" }, END_HEADERS | END_STREAM));
    c.send(IO_WRITE, cat(settings(), frame(3, 0, 1, new Uint8Array(4))));
    expect(c.tracker.h2Counters.unanswered).toBe(1);
    const block = c.headers(IO_READ, 3, { ":method": "GET", ":path": "/continued/long/path", ":scheme": "http", ":authority": "example" }).subarray(9);
    const half = Math.floor(block.length / 2);
    c.send(IO_READ, cat(frame(1, END_STREAM, 3, block.subarray(0, half)), frame(9, END_HEADERS, 3, block.subarray(half))));
    const done = c.send(IO_WRITE, c.headers(IO_WRITE, 3, { ":status": "204" }, END_HEADERS | END_STREAM));
    expect(done.map((x) => [x.request.path, x.request.host, x.response.status])).toEqual([["/continued/long/path", "example", 204]]);
  });

  test("a gRPC call reset before its response ends with the status gRPC gives the reset's code (a CANCEL at its grpc-timeout: DEADLINE_EXCEEDED), on either side", () => {
    const rst = (stream: number, code: number) => {
      const p = new Uint8Array(4);
      new DataView(p.buffer).setUint32(0, code);
      return frame(3, 0, stream, p);
    };
    const call = { ":method": "POST", ":scheme": "http", ":authority": "svc", "content-type": "application/grpc" };
    // Server side: the client cancels stream 1 (CANCEL), the server refuses stream 3 (REFUSED_STREAM).
    const c = new Conn();
    c.send(IO_READ, cat(PREFACE, settings(), c.headers(IO_READ, 1, { ...call, ":path": "/pkg.Svc/Slow" }), frame(0, END_STREAM, 1, new Uint8Array(5))));
    c.send(IO_WRITE, settings());
    const cancelled = c.send(IO_READ, rst(1, 0x8));
    expect(cancelled.map((x) => [x.role, x.response.status, x.rpc])).toEqual([["server", STATUS_UNKNOWN, { system: "grpc", service: "pkg.Svc", method: "Slow", statusCode: 1 }]]);
    c.send(IO_READ, cat(c.headers(IO_READ, 3, { ...call, ":path": "/pkg.Svc/Other" }), frame(0, END_STREAM, 3, new Uint8Array(5))));
    expect(c.send(IO_WRITE, rst(3, 0x7)).map((x) => x.rpc?.statusCode)).toEqual([14]);
    // A reset after the response began ends the call with what the response said; a plain HTTP/2 request reset
    // before an answer ends without a status (STATUS_RESET: counted in the RED metrics, no span, unanswered).
    c.send(IO_READ, cat(c.headers(IO_READ, 5, { ...call, ":path": "/pkg.Svc/Late" }), frame(0, END_STREAM, 5, new Uint8Array(5))));
    c.send(IO_WRITE, c.headers(IO_WRITE, 5, { ":status": "200", "content-type": "application/grpc" }));
    expect(c.send(IO_READ, rst(5, 0x8)).map((x) => [x.response.status, x.rpc?.statusCode])).toEqual([[200, undefined]]);
    c.send(IO_READ, c.headers(IO_READ, 7, { ":method": "GET", ":scheme": "http", ":path": "/plain" }, END_HEADERS | END_STREAM));
    expect(c.send(IO_READ, rst(7, 0x8)).map((x) => [x.request.path, x.response.status, x.rpc])).toEqual([["/plain", STATUS_RESET, undefined]]);
    expect(c.tracker.h2Counters.unanswered).toBe(1);
    // An RST_STREAM whose payload is not 4 bytes: INTERNAL.
    c.send(IO_READ, cat(c.headers(IO_READ, 9, { ...call, ":path": "/pkg.Svc/Odd" }), frame(0, END_STREAM, 9, new Uint8Array(5))));
    expect(c.send(IO_READ, frame(3, 0, 9, new Uint8Array(0))).map((x) => x.rpc?.statusCode)).toEqual([13]);
    // A call with a grpc-timeout reset by CANCEL once that time passed: the client's deadline, DEADLINE_EXCEEDED;
    // reset earlier: the client's cancel.
    c.ts = 1_000_000_000n;
    c.send(IO_READ, cat(c.headers(IO_READ, 11, { ...call, ":path": "/pkg.Svc/Slow", "grpc-timeout": "100m" }), frame(0, END_STREAM, 11, new Uint8Array(5))));
    c.ts += 100_000_000n;
    expect(c.send(IO_READ, rst(11, 0x8)).map((x) => x.rpc?.statusCode)).toEqual([4]);
    c.send(IO_READ, cat(c.headers(IO_READ, 13, { ...call, ":path": "/pkg.Svc/Slow", "grpc-timeout": "2S" }), frame(0, END_STREAM, 13, new Uint8Array(5))));
    c.ts += 500_000_000n;
    expect(c.send(IO_READ, rst(13, 0x8)).map((x) => x.rpc?.statusCode)).toEqual([1]);
    // Client side: its own cancel, written.
    const k = new Conn();
    k.send(IO_WRITE, cat(PREFACE, settings(), k.headers(IO_WRITE, 1, { ...call, ":path": "/pkg.Svc/Slow" }), frame(0, END_STREAM, 1, new Uint8Array(5))));
    k.send(IO_READ, settings());
    expect(k.send(IO_WRITE, rst(1, 0x8)).map((x) => [x.role, x.rpc?.statusCode])).toEqual([["client", 1]]);
  });

  test("the kernel stopping a connection's forwarding (a header-only record) stops both directions, counted apart from lost ones", () => {
    const c = new Conn();
    c.send(IO_READ, cat(PREFACE, settings(), c.headers(IO_READ, 1, { ":method": "GET", ":path": "/a", ":scheme": "http" }, END_HEADERS | END_STREAM)));
    c.send(IO_WRITE, settings());
    const marker = (io: Io) => c.tracker.push({ connection: "c", io, timestampNs: 9n, streamOffset: c.off[io]!, length: 100, data: new Uint8Array(0), meta: "m", h2Stopped: true });
    expect(marker(IO_WRITE)).toEqual([]);
    expect(c.tracker.h2Counters).toEqual({ lostDirections: 0, stoppedDirections: 2, unanswered: 0 });
    /* Nothing more of the connection decodes; a second marker counts nothing again. */
    expect(c.send(IO_WRITE, c.headers(IO_WRITE, 1, { ":status": "200" }, END_HEADERS | END_STREAM))).toEqual([]);
    expect(marker(IO_READ)).toEqual([]);
    expect(c.tracker.h2Counters).toEqual({ lostDirections: 0, stoppedDirections: 2, unanswered: 0 });
    c.tracker.close("c");
    expect(c.tracker.h2Counters).toEqual({ lostDirections: 0, stoppedDirections: 2, unanswered: 1 });
    /* A marker for a connection never seen (refused at its first HTTP/2 call) makes no state; its directions count as stopped. */
    c.tracker.push({ connection: "other", io: IO_READ, timestampNs: 1n, streamOffset: 0, length: 10, data: new Uint8Array(0), meta: "m", h2Stopped: true });
    expect(c.tracker.size).toBe(0);
    expect(c.tracker.h2Counters).toEqual({ lostDirections: 0, stoppedDirections: 4, unanswered: 1 });
  });

  test("a marker for an HTTP/1.x connection (a 101 whose forwarding was refused) counts no direction: its request counts as unanswered at close", () => {
    const t = new ExchangeTracker<string>();
    const call = (io: Io, streamOffset: number, text: string, h2Stopped = false): CapturedCall<string> => {
      const data = new TextEncoder().encode(text);
      return { connection: "h1", io, timestampNs: 1n, streamOffset, length: h2Stopped ? 100 : data.length, data: h2Stopped ? new Uint8Array(0) : data, meta: "m", h2Stopped };
    };
    const request = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    t.push(call(IO_READ, 0, request));
    expect(t.push(call(IO_WRITE, 0, "", true))).toEqual([]);
    expect(t.h2Counters).toEqual({ lostDirections: 0, stoppedDirections: 0, unanswered: 0 });
    expect(t.close("h1")).toEqual([]);
    expect(t.counters.unanswered).toBe(1);
  });

  test("an invalid Huffman string (EOS, padding) stops its direction, counted, without a throw; the other direction goes on", () => {
    for (const value of [Uint8Array.of(0x84, 0xff, 0xff, 0xff, 0xfc), Uint8Array.of(0x82, 0x1f, 0xff), Uint8Array.of(0x81, 0x18)]) {
      const c = new Conn();
      c.send(IO_WRITE, settings());
      /* :path (static index 4) as a literal without indexing, its value a bad Huffman string. */
      c.send(IO_READ, cat(PREFACE, settings(), frame(1, END_HEADERS | END_STREAM, 1, cat(Uint8Array.of(0x82, 0x04), value))));
      expect(c.tracker.h2Counters.lostDirections).toBe(1);
      c.send(IO_READ, c.headers(IO_READ, 3, { ":method": "GET", ":path": "/after", ":scheme": "http" }, END_HEADERS | END_STREAM));
      expect(c.send(IO_WRITE, c.headers(IO_WRITE, 3, { ":status": "200" }, END_HEADERS | END_STREAM))).toEqual([]);
      expect(c.tracker.h2Counters.lostDirections).toBe(1);
    }
  });

  test("calls split anywhere (frame headers, padded and prioritised header blocks, CONTINUATIONs) give the same exchanges", () => {
    const session = (c: Conn) => {
      const reqs: Uint8Array[] = [PREFACE, settings()];
      const resps: Uint8Array[] = [settings()];
      for (let id = 1; id < 40; id += 2) {
        const block = c.headers(IO_READ, id, { ":method": id % 3 ? "GET" : "POST", ":path": `/p/${id}?q=${"x".repeat(id)}`, ":scheme": "http", ":authority": "svc", "user-agent": `ua-${id % 4}` }).subarray(9);
        if (id % 4 === 1) {
          /* PADDED (3 octets) and PRIORITY (5 octets) around the fragment. */
          reqs.push(frame(1, END_HEADERS | END_STREAM | 0x8 | 0x20, id, cat(Uint8Array.of(3), new Uint8Array(5), block, new Uint8Array(3))));
        } else if (id % 4 === 3) {
          const half = Math.floor(block.length / 2);
          reqs.push(frame(1, END_STREAM, id, block.subarray(0, half)), frame(9, 0, id, new Uint8Array(0)), frame(9, END_HEADERS, id, block.subarray(half)));
        }
        resps.push(c.headers(IO_WRITE, id, { ":status": String(200 + (id % 5)), "content-type": "text/plain" }), frame(0, END_STREAM, id, new Uint8Array(id)));
      }
      return [cat(...reqs), cat(...resps)] as const;
    };
    const summary = (xs: ReadonlyArray<{ request: { method: string; target: string; host?: string }; response: { status: number } }>) => xs.map((x) => `${x.request.method} ${x.request.target} ${x.request.host} ${x.response.status}`);
    const whole = new Conn();
    const [wreq, wresp] = session(whole);
    whole.send(IO_READ, wreq);
    const expected = summary(whole.send(IO_WRITE, wresp));
    expect(expected.length).toBe(20);
    let seed = 7;
    for (const maxChunk of [1, 2, 5, 9, 10, 64]) {
      const c = new Conn();
      const [req, resp] = session(c);
      const got: ReturnType<typeof summary> = [];
      for (const [io, bytes] of [[IO_READ, req], [IO_WRITE, resp]] as const) {
        /* The first call opens HTTP/2 (the kernel forwards it whole): the preface. */
        for (let at = io === IO_READ ? c.send(io, bytes.subarray(0, PREFACE.length)).length + PREFACE.length : 0; at < bytes.length; ) {
          seed = (seed * 1103515245 + 12345) & 0x7fffffff;
          const n = Math.min(bytes.length - at, 1 + (seed % maxChunk));
          got.push(...summary(c.send(io, bytes.subarray(at, at + n))));
          at += n;
        }
      }
      expect({ maxChunk, got }).toEqual({ maxChunk, got: expected });
      expect(c.tracker.h2Counters.lostDirections).toBe(0);
    }
  });

  test("a released stream (counted, not made a span) is reused for a later one, with nothing of the earlier left", () => {
    const c = new Conn();
    c.send(IO_WRITE, settings());
    const grpc = { ":method": "POST", ":scheme": "http", ":authority": "svc", "content-type": "application/grpc" };
    c.send(IO_READ, cat(PREFACE, settings(), c.headers(IO_READ, 1, { ...grpc, ":path": "/pkg.Svc/One" }, END_HEADERS | END_STREAM)));
    const [first] = c.send(IO_WRITE, cat(c.headers(IO_WRITE, 1, { ":status": "200", "content-type": "application/grpc" }), c.headers(IO_WRITE, 1, { "grpc-status": "7" }, END_HEADERS | END_STREAM)));
    expect([first!.request.path, first!.response.status, first!.rpc]).toEqual(["/pkg.Svc/One", 200, { system: "grpc", service: "pkg.Svc", method: "One", statusCode: 7 }]);
    const kept = first!;
    c.tracker.release(kept);
    /* A plain HTTP/2 request on stream 3, reset before an answer: the released object serves it, made new. */
    c.send(IO_READ, c.headers(IO_READ, 3, { ":method": "GET", ":scheme": "http", ":authority": "svc", ":path": "/two" }, END_HEADERS | END_STREAM));
    const [second] = c.send(IO_WRITE, c.headers(IO_WRITE, 3, { ":status": "204" }, END_HEADERS | END_STREAM));
    expect(second).toBe(kept);
    expect([second!.request.method, second!.request.path, second!.response.status, second!.rpc, second!.startNs, second!.endNs]).toEqual(["GET", "/two", 204, undefined, 4n, 5n]);
    /* Not released: a new object for the next stream. */
    c.send(IO_READ, c.headers(IO_READ, 5, { ":method": "GET", ":scheme": "http", ":authority": "svc", ":path": "/three" }, END_HEADERS | END_STREAM));
    const [third] = c.send(IO_WRITE, c.headers(IO_WRITE, 5, { ":status": "200" }, END_HEADERS | END_STREAM));
    expect(third).not.toBe(kept);
    expect([second!.request.path, third!.request.path]).toEqual(["/two", "/three"]);
  });
});

describe("HTTP/1.1 Upgrade to h2c (RFC 9113 section 3.2)", () => {
  const te = new TextEncoder();
  const UPGRADE_REQUEST = "GET /up?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n";
  const SWITCHING = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
  const rows = (xs: ReadonlyArray<{ role: string; request: { method: string; target: string; version?: string }; response: { status: number; version: string }; scheme?: string }>) =>
    xs.map((x) => `${x.role} ${x.request.method} ${x.request.target} ${x.request.version} ${x.response.status} ${x.response.version} ${x.scheme}`);

  test("server side: the upgraded request is stream 1, answered in HTTP/2; the 101 is no exchange; later streams follow", () => {
    const c = new Conn();
    expect(c.send(IO_READ, te.encode(UPGRADE_REQUEST))).toEqual([]);
    /* The 101 and the server's SETTINGS in one write, then stream 1's response. */
    expect(c.send(IO_WRITE, cat(te.encode(SWITCHING), settings()))).toEqual([]);
    expect(rows(c.send(IO_WRITE, cat(c.headers(IO_WRITE, 1, { ":status": "200" }), frame(0, END_STREAM, 1, te.encode("hi")))))).toEqual(["server GET /up?x=1 2 200 2 http"]);
    expect(c.send(IO_READ, cat(PREFACE, settings(), c.headers(IO_READ, 3, { ":method": "GET", ":path": "/next", ":scheme": "http" }, END_HEADERS | END_STREAM)))).toEqual([]);
    expect(rows(c.send(IO_WRITE, c.headers(IO_WRITE, 3, { ":status": "404" }, END_HEADERS | END_STREAM)))).toEqual(["server GET /next 2 404 2 http"]);
    expect(c.tracker.h2Counters).toMatchObject({ lostDirections: 0, unanswered: 0 });
    expect(c.tracker.counters.unanswered).toBe(0);
  });

  test("client side: the 101, SETTINGS and stream 1's whole response in one read", () => {
    const c = new Conn();
    const read = (bytes: Uint8Array) => c.send(IO_READ, bytes);
    expect(c.send(IO_WRITE, te.encode(UPGRADE_REQUEST))).toEqual([]);
    const response = cat(te.encode(SWITCHING), settings(), c.headers(IO_READ, 1, { ":status": "200" }), frame(0, END_STREAM, 1, te.encode("hello")));
    expect(rows(read(response))).toEqual(["client GET /up?x=1 2 200 2 http"]);
    expect(c.send(IO_WRITE, cat(PREFACE, settings()))).toEqual([]);
    expect(c.tracker.h2Counters.lostDirections).toBe(0);
  });

  test("a 101 to another protocol (WebSocket) stays an HTTP/1.1 exchange with status 101", () => {
    const c = new Conn();
    c.send(IO_READ, te.encode("GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"));
    expect(rows(c.send(IO_WRITE, te.encode("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")))).toEqual(["server GET /ws 1.1 101 1.1 undefined"]);
  });
});

describe("HTTP/2 connections decoded from their middle (opened before the agent looked)", () => {
  test("frame headers: each type's stream, flags and fixed length; more than 16,384 bytes, or the reserved bit, is none", () => {
    const h = (len: number, type: number, flags: number, stream: number) => frame(type, flags, stream, new Uint8Array(len)).subarray(0, 9);
    /* [payload length, type, flags, stream, the frame's whole length or 0] */
    const cases: Array<[number, number, number, number, number]> = [
      [10, 0, 1, 3, 19], [10, 0, 1, 0, 0], [20, 1, 0x25, 5, 29], [20, 1, 0x02, 5, 0], [4, 8, 0, 0, 13], [5, 8, 0, 0, 0],
      [8, 6, 1, 0, 17], [8, 6, 0, 1, 0], [12, 4, 0, 0, 21], [0, 4, 1, 0, 9], [16385, 0, 0, 1, 0], [1, 10, 0, 1, 0],
    ];
    for (const [len, type, flags, stream, whole] of cases) expect([len, type, flags, stream, h2FrameAt(h(len, type, flags, stream), 0)]).toEqual([len, type, flags, stream, whole]);
    const reserved = h(4, 3, 0, 1);
    reserved[5] = 0x80;
    expect(h2FrameAt(reserved, 0)).toBe(0);
    expect(h2FrameAt(new TextEncoder().encode("GET / HTTP/1.1\r\n"), 0)).toBe(0);
  });

  /** A gRPC-like connection whose first streams went by before the agent looked: only the encoders saw them. */
  function opened(): Conn {
    const c = new Conn();
    const before = (io: Io, bytes: Uint8Array) => void (c.off[io]! += bytes.length);
    before(IO_READ, cat(PREFACE, settings()));
    before(IO_WRITE, settings());
    for (let id = 1; id <= 19; id += 2) {
      const grpc = id < 19;
      before(IO_READ, c.headers(IO_READ, id, grpc ? { ":method": "POST", ":scheme": "http", ":path": "/pkg.Svc/Old", ":authority": "svc", "content-type": "application/grpc" } : { ":method": "PUT", ":scheme": "http", ":path": "/put", ":authority": "svc" }, END_HEADERS | END_STREAM));
      before(IO_WRITE, grpc ? cat(c.headers(IO_WRITE, id, { ":status": "200", "content-type": "application/grpc" }), c.headers(IO_WRITE, id, { "grpc-status": "0" }, END_HEADERS | END_STREAM)) : c.headers(IO_WRITE, id, { ":status": "503" }, END_HEADERS | END_STREAM));
    }
    return c;
  }
  const midstream = (c: Conn, io: Io, bytes: Uint8Array) => {
    const call: CapturedCall<string> = { connection: "c", io, timestampNs: c.ts++, streamOffset: c.off[io]!, length: bytes.length, data: bytes, meta: "m", h2Midstream: true };
    c.off[io]! += bytes.length;
    return c.tracker.push(call);
  };

  test("server side: each direction starts at a call that starts with frames; fields from the table's earlier part are unknown, not wrong", () => {
    const c = opened();
    /* The end of a DATA frame's payload (no frame header at the call's start): skipped, not taken for frames. */
    expect(midstream(c, IO_READ, new Uint8Array(40).fill(0xff))).toEqual([]);
    /* A CONTINUATION (the rest of a header block from before) is no place to start either: taken for one, it would
     * stop the direction (a CONTINUATION without its HEADERS). */
    expect(midstream(c, IO_READ, frame(9, END_HEADERS, 19, new Uint8Array([0x82])))).toEqual([]);
    /* Stream 21: :authority and content-type named by entries from before (hpack.js sends :path as a literal each time). */
    expect(midstream(c, IO_READ, c.headers(IO_READ, 21, { ":method": "POST", ":scheme": "http", ":path": "/pkg.Svc/Old", ":authority": "svc", "content-type": "application/grpc" }, END_HEADERS | END_STREAM))).toEqual([]);
    /* A response to stream 19, open before: its stream is unknown here, ignored. */
    expect(midstream(c, IO_WRITE, c.headers(IO_WRITE, 19, { ":status": "200" }, END_HEADERS | END_STREAM))).toEqual([]);
    const [old] = midstream(c, IO_WRITE, cat(c.headers(IO_WRITE, 21, { ":status": "200", "content-type": "application/grpc" }), c.headers(IO_WRITE, 21, { "grpc-status": "0" }, END_HEADERS | END_STREAM)));
    /* Its content-type and grpc-status were indexed before: a gRPC call by its shape (below), status unknown. */
    expect([old!.role, old!.request.method, old!.request.path, old!.request.host, old!.response.status, old!.rpc, old!.request.version]).toEqual([
      "server",
      "POST",
      "/pkg.Svc/Old",
      undefined,
      200,
      { system: "grpc", service: "pkg.Svc", method: "Old", statusCode: STATUS_UNKNOWN },
      "2",
    ]);
    /* Stream 23: a path never sent before goes into the table as a literal, known from here on. */
    midstream(c, IO_READ, c.headers(IO_READ, 23, { ":method": "GET", ":scheme": "http", ":path": "/new/7", ":authority": "svc" }, END_HEADERS | END_STREAM));
    const [fresh] = midstream(c, IO_WRITE, c.headers(IO_WRITE, 23, { ":status": "404" }, END_HEADERS | END_STREAM));
    expect([fresh!.request.method, fresh!.request.path, fresh!.response.status]).toEqual(["GET", "/new/7", 404]);
    midstream(c, IO_READ, c.headers(IO_READ, 25, { ":method": "GET", ":scheme": "http", ":path": "/new/7", ":authority": "svc" }, END_HEADERS | END_STREAM));
    const [again] = midstream(c, IO_WRITE, c.headers(IO_WRITE, 25, { ":status": "404" }, END_HEADERS | END_STREAM));
    expect([again!.request.path, again!.response.status]).toEqual(["/new/7", 404]);
    /* Stream 27: PUT was indexed before, so its :method is unknown: `_OTHER` on a new stream of the request side. Its
     * 503 was indexed before too: the status is unknown (STATUS_UNKNOWN), not 0 (no response). */
    const unanswered = c.tracker.h2Counters.unanswered;
    midstream(c, IO_READ, c.headers(IO_READ, 27, { ":method": "PUT", ":scheme": "http", ":path": "/put", ":authority": "svc" }, END_HEADERS | END_STREAM));
    const [unknown] = midstream(c, IO_WRITE, c.headers(IO_WRITE, 27, { ":status": "503" }, END_HEADERS | END_STREAM));
    expect([unknown!.request.method, unknown!.request.path, unknown!.response.status]).toEqual(["_OTHER", "/put", STATUS_UNKNOWN]);
    expect(c.tracker.h2Counters.unanswered).toBe(unanswered);
    midstream(c, IO_READ, c.headers(IO_READ, 29, { ":method": "PUT", ":scheme": "http", ":path": "/put", ":authority": "svc" }, END_HEADERS | END_STREAM));
    const [put] = midstream(c, IO_WRITE, c.headers(IO_WRITE, 29, { ":status": "200" }, END_HEADERS | END_STREAM));
    expect([put!.request.method, put!.request.path, put!.response.status]).toEqual(["_OTHER", "/put", 200]);
    expect(c.tracker.h2Counters.lostDirections).toBe(0);
  });

  test("gRPC by its shape: a POST to /service/method without its content-type, answered 200 and ended on a header block", () => {
    const c = opened();
    const post = (id: number, path: string, extra: Record<string, string> = { "content-type": "application/grpc" }) =>
      midstream(c, IO_READ, c.headers(IO_READ, id, { ":method": "POST", ":scheme": "http", ":path": path, ":authority": "svc", ...extra }, END_HEADERS | END_STREAM));
    const rpcOf = (x: { rpc?: unknown } | undefined) => x?.rpc;
    /* Trailers-only (a header block with END_STREAM): its grpc-status 5, never sent before, is a literal whose name
     * is the entry of grpc-status 0 from before: unknown too. */
    post(21, "/pkg.Svc/Old");
    const [only] = midstream(c, IO_WRITE, c.headers(IO_WRITE, 21, { ":status": "200", "content-type": "application/grpc", "grpc-status": "5" }, END_HEADERS | END_STREAM));
    expect(rpcOf(only)).toEqual({ system: "grpc", service: "pkg.Svc", method: "Old", statusCode: STATUS_UNKNOWN });
    /* HEADERS, DATA, trailers with grpc-status 0 from before: a call of unknown status. */
    post(23, "/pkg.Svc/Other");
    midstream(c, IO_WRITE, cat(c.headers(IO_WRITE, 23, { ":status": "200", "content-type": "application/grpc" }), frame(0, 0, 23, new Uint8Array([0, 0, 0, 0, 1, 7]))));
    const [trailed] = midstream(c, IO_WRITE, c.headers(IO_WRITE, 23, { "grpc-status": "0" }, END_HEADERS | END_STREAM));
    expect(rpcOf(trailed)).toEqual({ system: "grpc", service: "pkg.Svc", method: "Other", statusCode: STATUS_UNKNOWN });
    /* A response that ends on DATA is no gRPC response. */
    post(25, "/pkg.Svc/Old");
    const [data] = midstream(c, IO_WRITE, cat(c.headers(IO_WRITE, 25, { ":status": "200", "content-type": "application/grpc" }), frame(0, END_STREAM, 25, new Uint8Array(6))));
    expect([data!.request.path, data!.response.status, rpcOf(data)]).toEqual(["/pkg.Svc/Old", 200, undefined]);
    /* Nor one with another status (a proxy's 404), ended on a header block as it may be. */
    post(27, "/pkg.Svc/Old");
    const [missing] = midstream(c, IO_WRITE, c.headers(IO_WRITE, 27, { ":status": "404" }, END_HEADERS | END_STREAM));
    expect([missing!.response.status, rpcOf(missing)]).toEqual([404, undefined]);
    /* Another path shape, another method: not gRPC. */
    post(31, "/pkg.Svc/Old/more");
    midstream(c, IO_READ, c.headers(IO_READ, 33, { ":method": "GET", ":scheme": "http", ":path": "/pkg.Svc/Old", ":authority": "svc", "content-type": "application/grpc" }, END_HEADERS | END_STREAM));
    for (const id of [31, 33]) {
      const [x] = midstream(c, IO_WRITE, c.headers(IO_WRITE, id, { ":status": "200", "grpc-status": "0" }, END_HEADERS | END_STREAM));
      expect([x!.request.path, x!.response.status, rpcOf(x)]).toEqual([id === 31 ? "/pkg.Svc/Old/more" : "/pkg.Svc/Old", 200, undefined]);
    }
  });

  test("a connection the kernel stopped and forwards again is decoded anew from the call that resumed it, as one found in its middle", () => {
    const c = new Conn();
    const call = (io: Io, bytes: Uint8Array, flags: { h2Stopped?: boolean; h2Resumed?: boolean } = {}) => {
      const x: CapturedCall<string> = { connection: "c", io, timestampNs: c.ts++, streamOffset: c.off[io]!, length: bytes.length, data: bytes, meta: "m", ...flags };
      c.off[io]! += bytes.length;
      return c.tracker.push(x);
    };
    const get = (id: number, path: string) => c.headers(IO_READ, id, { ":method": "GET", ":scheme": "http", ":path": path, ":authority": "svc", "x-tenant": "blue" }, END_HEADERS | END_STREAM);
    const ok = (id: number) => c.headers(IO_WRITE, id, { ":status": "200", "content-type": "text/plain" }, END_HEADERS | END_STREAM);
    call(IO_READ, cat(PREFACE, settings(), get(1, "/a")));
    call(IO_WRITE, settings());
    expect(call(IO_WRITE, ok(1)).map((x) => x.request.path)).toEqual(["/a"]);
    /* Stream 3 opens; then the kernel stops forwarding (a header-only record). */
    call(IO_READ, get(3, "/b"));
    const stopped = c.tracker.h2Counters.stoppedDirections;
    expect(c.tracker.push({ connection: "c", io: IO_WRITE, timestampNs: c.ts++, streamOffset: c.off[IO_WRITE]!, length: 0, data: new Uint8Array(0), meta: "m", h2Stopped: true })).toEqual([]);
    expect(c.tracker.h2Counters.stoppedDirections).toBe(stopped + 2);
    /* What went by while stopped: only the encoders saw it (x-trace indexed, x-tenant's entry moved on). */
    const gap = (io: Io, bytes: Uint8Array) => void (c.off[io]! += bytes.length);
    gap(IO_WRITE, ok(3));
    gap(IO_READ, c.headers(IO_READ, 5, { ":method": "GET", ":scheme": "http", ":path": "/c", ":authority": "svc", "x-trace": "t1" }, END_HEADERS | END_STREAM));
    gap(IO_WRITE, ok(5));
    const unanswered = c.tracker.h2Counters.unanswered;
    /* Resumed at stream 7: its x-trace names an entry added in the gap (unknown), its path is a literal. */
    expect(call(IO_READ, c.headers(IO_READ, 7, { ":method": "GET", ":scheme": "http", ":path": "/d", ":authority": "svc", "x-trace": "t1" }, END_HEADERS | END_STREAM), { h2Resumed: true })).toEqual([]);
    /* Stream 3, open when it stopped, is counted unanswered once, not reported. */
    expect(c.tracker.h2Counters.unanswered).toBe(unanswered + 1);
    /* The response in two records of one call, both marked (a call over a record's room): the second continues the
     * first, no new start (which would forget stream 7 and leave its DATA nothing to end). */
    expect(call(IO_WRITE, c.headers(IO_WRITE, 7, { ":status": "200", "content-type": "text/plain" }), { h2Resumed: true })).toEqual([]);
    const [d] = call(IO_WRITE, frame(0, END_STREAM, 7, new Uint8Array(4)), { h2Resumed: true });
    expect([d!.request.method, d!.request.path, d!.response.status]).toEqual(["GET", "/d", 200]);
    /* And on from there. */
    call(IO_READ, get(9, "/e"));
    const [e] = call(IO_WRITE, ok(9));
    expect([e!.request.path, e!.response.status]).toEqual(["/e", 200]);
    expect(c.tracker.h2Counters.lostDirections).toBe(0);
  });

  test("without the kernel's mark the same calls decode nothing: a connection seen after its start is not guessed at", () => {
    const c = opened();
    expect(c.send(IO_READ, c.headers(IO_READ, 21, { ":method": "GET", ":scheme": "http", ":path": "/new/7", ":authority": "svc" }, END_HEADERS | END_STREAM))).toEqual([]);
    expect(c.send(IO_WRITE, c.headers(IO_WRITE, 21, { ":status": "200" }, END_HEADERS | END_STREAM))).toEqual([]);
  });
});
