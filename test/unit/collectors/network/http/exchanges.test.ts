import { describe, expect, test } from "bun:test";
import { ExchangeTracker, IO_READ, IO_WRITE, type CapturedCall, type Io } from "../../../../../src/collectors/network/http/exchanges";
import type { HttpRequestHead } from "../../../../../src/collectors/network/http/parser";

const CAPTURE = 256;
const enc = (s: string) => new TextEncoder().encode(s);

/** A connection as the kernel reports it: per direction, stream offsets, and the first CAPTURE bytes of each call. */
function connection(tracker: ExchangeTracker<string>, key = "1:1") {
  const offsets = [0, 0];
  return (io: Io, text: string, atNs: bigint, nowMs = 0) => {
    const bytes = enc(text);
    const call: CapturedCall<string> = { connection: key, io, timestampNs: atNs, streamOffset: offsets[io]!, length: bytes.length, data: bytes.subarray(0, CAPTURE), meta: `m${atNs}` };
    offsets[io]! += bytes.length;
    return tracker.push(call, nowMs);
  };
}

const chunk = (s: string) => `${s.length.toString(16)}\r\n${s}\r\n`;

describe("HTTP exchanges end at the response's last byte", () => {
  test("a chunked response written over several calls ends at the terminator's call", () => {
    const t = new ExchangeTracker<string>();
    const call = connection(t);
    expect(call(IO_READ, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n", 1_000n)).toEqual([]);
    expect(call(IO_WRITE, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 2_000n)).toEqual([]);
    expect(call(IO_WRITE, chunk("part one"), 50_000n)).toEqual([]);
    expect(call(IO_WRITE, chunk("x".repeat(5000)), 150_000n)).toEqual([]);
    const done = call(IO_WRITE, "0\r\n\r\n", 250_000n);
    expect(done).toHaveLength(1);
    expect(done[0]).toMatchObject({ role: "server", startNs: 1_000n, endNs: 250_000n });
    expect(done[0]!.response.status).toBe(200);
  });

  test("a Content-Length body read in many calls (only the first bytes of each captured) ends at the call with its last byte", () => {
    const t = new ExchangeTracker<string>();
    const call = connection(t);
    call(IO_WRITE, "GET /big HTTP/1.1\r\nHost: h\r\n\r\n", 10n);
    const body = 1 << 20;
    call(IO_READ, `HTTP/1.1 200 OK\r\nContent-Length: ${body}\r\n\r\n` + "a".repeat(16_000), 20n);
    let left = body - 16_000;
    let ts = 30n;
    let done: readonly unknown[] = [];
    while (left > 0) {
      const n = Math.min(16_384, left);
      done = call(IO_READ, "b".repeat(n), ts);
      left -= n;
      if (left > 0) expect(done).toEqual([]);
      ts += 10n;
    }
    expect(done).toHaveLength(1);
    expect(done[0]).toMatchObject({ role: "client", startNs: 10n, endNs: ts - 10n });
  });

  test("keep-alive: each response ends at its own last call; a bodyless response at its head", () => {
    const t = new ExchangeTracker<string>();
    const call = connection(t);
    call(IO_READ, "GET /a HTTP/1.1\r\n\r\n", 1n);
    expect(call(IO_WRITE, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345", 2n)).toEqual([]);
    expect(call(IO_WRITE, "67890", 3n).map((x) => x.endNs)).toEqual([3n]);
    call(IO_READ, "HEAD /b HTTP/1.1\r\n\r\n", 4n);
    expect(call(IO_WRITE, "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", 5n).map((x) => [(x.request as HttpRequestHead).method, x.endNs])).toEqual([["HEAD", 5n]]);
  });

  test("a response whose framing is lost (head longer than the capture) ends at its last call: when the next response starts, at close, or once quiet", () => {
    const t = new ExchangeTracker<string>();
    const call = connection(t);
    const longHead = `HTTP/1.1 200 OK\r\nSet-Cookie: ${"c".repeat(400)}\r\nContent-Length: 20\r\n\r\n` + "x".repeat(20);
    call(IO_READ, "GET /1 HTTP/1.1\r\n\r\n", 1n);
    expect(call(IO_WRITE, longHead, 2n)).toEqual([]);
    call(IO_READ, "GET /2 HTTP/1.1\r\n\r\n", 3n);
    expect(call(IO_WRITE, longHead, 4n).map((x) => [(x.request as HttpRequestHead).path, x.endNs])).toEqual([["/1", 2n]]);
    expect(t.flushIdle(0)).toEqual([]); // active at 0 ms: not quiet before 0
    expect(t.flushIdle(1).map((x) => [(x.request as HttpRequestHead).path, x.endNs])).toEqual([["/2", 4n]]);
    call(IO_READ, "GET /3 HTTP/1.1\r\n\r\n", 5n, 10);
    call(IO_WRITE, "HTTP/1.1 200 OK\r\n\r\nstreamed until close", 6n, 10);
    call(IO_WRITE, "more", 7n, 10);
    expect(t.flushIdle(5)).toEqual([]);
    expect(t.close("1:1").map((x) => [(x.request as HttpRequestHead).path, x.endNs])).toEqual([["/3", 7n]]);
    expect(t.close("1:1")).toEqual([]);
  });

  test("a 600-byte request line still gives an exchange: method and the captured prefix of the path, marked truncated", () => {
    const t = new ExchangeTracker<string>();
    const call = connection(t);
    const path = "/signed/" + "p".repeat(100);
    const target = `${path}?X-Amz-Signature=${"f".repeat(470)}`;
    expect(target.length).toBeGreaterThan(580);
    call(IO_READ, `GET ${target} HTTP/1.1\r\nHost: bucket.local\r\n\r\n`, 1n);
    const done = call(IO_WRITE, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", 2n);
    expect(done).toHaveLength(1);
    const req = done[0]!.request as HttpRequestHead;
    expect(req).toMatchObject({ method: "GET", path, truncated: "url", version: undefined });
    expect(req.target.length).toBe(CAPTURE - 4);
    expect(t.counters.unparsed).toBe(0);
  });

  test("a request line cut inside its path keeps the captured prefix; a head that does not parse is counted", () => {
    const t = new ExchangeTracker<string>();
    const call = connection(t);
    call(IO_READ, `POST /${"a".repeat(600)} HTTP/1.1\r\n\r\n`, 1n);
    const done = call(IO_WRITE, "HTTP/1.1 414 URI Too Long\r\nContent-Length: 0\r\n\r\n", 2n);
    expect((done[0]!.request as HttpRequestHead)).toMatchObject({ method: "POST", path: "/" + "a".repeat(CAPTURE - 6), truncated: "url" });
    const other = connection(t, "1:2");
    other(IO_READ, "GET /x HTTP/7.7\r\n\r\n", 3n);
    expect(t.counters.unparsed).toBe(1);
  });

  test("headers beyond the capture: the request keeps its start line and says its headers were cut", () => {
    const t = new ExchangeTracker<string>();
    const call = connection(t);
    call(IO_READ, `GET /h?q=1 HTTP/1.1\r\nHost: svc\r\nCookie: ${"k".repeat(500)}\r\n\r\n`, 1n);
    const done = call(IO_WRITE, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 2n);
    expect(done[0]!.request).toMatchObject({ method: "GET", path: "/h", version: "1.1", host: "svc", truncated: "headers" });
  });
});

describe("a close applies to the connection it closed, not to a later one at the same address", () => {
  test("a close older than a connection's first call leaves it; the earlier connection's close still ends its own", () => {
    const t = new ExchangeTracker<string>();
    const first = connection(t, "7:0xa");
    first(IO_READ, "GET /old HTTP/1.1\r\n\r\n", 1_000n);
    // Closed at 2,000 ns; its close is applied later (it comes through another ring buffer).
    // The address is reused at once: a new connection's request starts at offset 0 and replaces the old state.
    const second = connection(t, "7:0xa");
    expect(second(IO_READ, "GET /new HTTP/1.1\r\n\r\n", 3_000n)).toEqual([]);
    expect(t.counters.unanswered).toBe(1);
    // The old close arrives: the connection at that address began after it, so it stays and its response pairs.
    expect(t.close("7:0xa", 2_000n)).toEqual([]);
    expect(second(IO_WRITE, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 4_000n).map((x) => (x.request as HttpRequestHead).path)).toEqual(["/new"]);
    // Its own close (after its first call) ends it; so does a close without a time.
    second(IO_READ, "GET /unanswered HTTP/1.1\r\n\r\n", 5_000n);
    t.close("7:0xa", 6_000n);
    expect(t.counters.unanswered).toBe(2);
    expect(t.size).toBe(0);
    connection(t, "7:0xa")(IO_READ, "GET /x HTTP/1.1\r\n\r\n", 7_000n);
    t.close("7:0xa");
    expect(t.size).toBe(0);
  });

  test("closeMatching with an exit's time keeps the connections a later process of the same pid opened", () => {
    const t = new ExchangeTracker<string>();
    connection(t, "tls:42:1")(IO_READ, "GET /a HTTP/1.1\r\n\r\n", 1_000n);
    connection(t, "tls:42:2")(IO_READ, "GET /b HTTP/1.1\r\n\r\n", 5_000n);
    t.closeMatching("tls:42:", 3_000n);
    expect(t.size).toBe(1);
    expect(t.counters.unanswered).toBe(1);
  });
});
