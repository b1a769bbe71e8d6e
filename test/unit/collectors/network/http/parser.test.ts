import { describe, expect, test } from "bun:test";
import { HttpStreamParser, looksLikeMessageStart, pathOfTarget, type HttpRequestHead, type HttpResponseHead } from "../../../../../src/collectors/network/http/parser";
import { ExchangeTracker, IO_READ, IO_WRITE } from "../../../../../src/collectors/network/http/exchanges";

const enc = (s: string) => new TextEncoder().encode(s);

/** Feeds whole calls (everything captured) in stream order. */
function feed(p: HttpStreamParser<number>, chunks: string[], startOffset = 0) {
  let off = startOffset;
  const out: Array<{ head: unknown; at: number }> = [];
  chunks.forEach((c, i) => {
    const b = enc(c);
    out.push(...p.push(off, b.length, b, i));
    off += b.length;
  });
  return out;
}

const curlGet = "GET /a?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n";
const resp = (status: number, body: string) => `HTTP/1.1 ${status} OK\r\ncontent-type: text/plain\r\nContent-Length: ${body.length}\r\n\r\n${body}`;

describe("HTTP/1.x stream parser", () => {
  test("a request captured whole", () => {
    const m = feed(new HttpStreamParser<number>(), [curlGet]);
    expect(m).toHaveLength(1);
    const h = m[0]!.head as HttpRequestHead;
    expect(h).toMatchObject({ kind: "request", method: "GET", target: "/a?x=1", path: "/a", version: "1.1", host: "127.0.0.1:8080", userAgent: "curl/7.88.1", complete: true });
  });

  test("a request split across reads at every position gives the same single message", () => {
    for (let cut = 1; cut < curlGet.length; cut++) {
      const p = new HttpStreamParser<number>();
      const m = feed(p, [curlGet.slice(0, cut), curlGet.slice(cut)]);
      expect(m).toHaveLength(1);
      expect((m[0]!.head as HttpRequestHead).path).toBe("/a");
      expect(m[0]!.at).toBe(0);
      expect(p.state).toBe("idle");
    }
  });

  test("pipelined requests in one read are separate messages, in order", () => {
    const post = "POST /submit HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello=world";
    const m = feed(new HttpStreamParser<number>(), [curlGet + post + "GET /third HTTP/1.1\r\nHost: h\r\n\r\n"]);
    expect(m.map((x) => (x.head as HttpRequestHead).target)).toEqual(["/a?x=1", "/submit", "/third"]);
  });

  test("keep-alive: responses with bodies, one per write, never merge", () => {
    const m = feed(new HttpStreamParser<number>(), [resp(200, "hello"), resp(404, "nope!"), resp(500, "")]);
    expect(m.map((x) => (x.head as HttpResponseHead).status)).toEqual([200, 404, 500]);
    expect(m.map((x) => x.at)).toEqual([0, 1, 2]);
  });

  test("a body that looks like a request line is body, not a new message", () => {
    const body = "GET /not-a-request HTTP/1.1\r\n\r\n";
    const m = feed(new HttpStreamParser<number>(), [`POST /p HTTP/1.1\r\nContent-Length: ${body.length}\r\n\r\n`, body, "GET /next HTTP/1.1\r\n\r\n"]);
    expect(m.map((x) => (x.head as HttpRequestHead).target)).toEqual(["/p", "/next"]);
  });

  test("chunked bodies are followed to their end", () => {
    const r = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n";
    for (let cut = 1; cut < r.length; cut += 7) {
      const m = feed(new HttpStreamParser<number>(), [r.slice(0, cut), r.slice(cut), resp(201, "x")]);
      expect(m.map((x) => (x.head as HttpResponseHead).status)).toEqual([200, 201]);
    }
  });

  test("a body the kernel did not capture is skipped exactly by stream offsets", () => {
    const p = new HttpStreamParser<number>();
    const head = enc("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
    const m1 = p.push(0, head.length + 100000, head, 1); // one write: head captured, body beyond the captured bytes
    const next = enc(resp(204, ""));
    const m2 = p.push(head.length + 100000, next.length, next, 2);
    expect([...m1, ...m2].map((x) => (x.head as HttpResponseHead).status)).toEqual([200, 204]);
    expect(p.resyncs).toBe(0);
  });

  test("bytes never seen outside a body lose sync; the next message start resynchronises", () => {
    const p = new HttpStreamParser<number>();
    const a = enc(curlGet);
    p.push(0, a.length, a, 0);
    const b = enc("GET /after-gap HTTP/1.1\r\n\r\n");
    const m = p.push(a.length + 500, b.length, b, 1); // 500 bytes of something in between
    expect(m.map((x) => (x.head as HttpRequestHead).path)).toEqual(["/after-gap"]);
  });

  test("non-HTTP traffic is ignored", () => {
    const p = new HttpStreamParser<number>();
    const tls = Uint8Array.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]);
    expect(p.push(0, tls.length, tls, 0)).toEqual([]);
    const redis = enc("*1\r\n$4\r\nPING\r\n");
    expect(p.push(tls.length, redis.length, redis, 1)).toEqual([]);
    const lower = enc("get / http/1.1\r\n\r\n");
    expect(p.push(tls.length + redis.length, lower.length, lower, 2)).toEqual([]);
    expect(p.ignoredCalls).toBe(3);
    const smtp = enc("HELO example.com\r\n");
    expect(new HttpStreamParser<number>().push(0, smtp.length, smtp, 0)).toEqual([]);
  });

  test("a head cut by the capture limit still reports its start line", () => {
    const p = new HttpStreamParser<number>();
    const full = enc("GET /long HTTP/1.1\r\nHost: example\r\nCookie: " + "x".repeat(1000) + "\r\n\r\n");
    const m = p.push(0, full.length, full.subarray(0, 256), 0);
    expect(m).toHaveLength(1);
    expect(m[0]!.head).toMatchObject({ method: "GET", path: "/long", host: "example", complete: false });
    const next = enc("GET /next HTTP/1.1\r\n\r\n");
    expect(p.push(full.length, next.length, next, 1).map((x) => (x.head as HttpRequestHead).path)).toEqual(["/next"]);
  });

  test("responses to HEAD and 204/304 have no body even with Content-Length", () => {
    const p = new HttpStreamParser<number>(() => true);
    const m = feed(p, ["HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n"]);
    expect(m).toHaveLength(2);
    const q = feed(new HttpStreamParser<number>(), ["HTTP/1.1 304 Not Modified\r\nContent-Length: 42\r\n\r\n", resp(200, "")]);
    expect(q).toHaveLength(2);
  });

  test("message start detection and target paths", () => {
    expect(looksLikeMessageStart(enc("GE"))).toBe(true);
    expect(looksLikeMessageStart(enc("HTT"))).toBe(true);
    expect(looksLikeMessageStart(enc("GX"))).toBe(false);
    expect(looksLikeMessageStart(enc("DELETE /x"))).toBe(true);
    expect(looksLikeMessageStart(enc("FOO /x"))).toBe(false);
    expect(pathOfTarget("/a/b?c=d#e")).toBe("/a/b");
    expect(pathOfTarget("http://host:80/p?q")).toBe("/p");
    expect(pathOfTarget("http://host")).toBe("/");
    expect(pathOfTarget("example.com:443")).toBeUndefined();
    expect(pathOfTarget("*")).toBe("*");
  });
});

describe("exchange tracker", () => {
  const call = (connection: string, io: 0 | 1, off: number, s: string, ts: number) => {
    const data = enc(s);
    return { connection, io, timestampNs: BigInt(ts), streamOffset: off, length: data.length, data, meta: { pid: 1 } } as const;
  };

  test("server side: keep-alive requests pair with responses in order", () => {
    const t = new ExchangeTracker<{ pid: number }>();
    const r1 = "GET /one HTTP/1.1\r\nHost: h\r\n\r\n";
    const r2 = "GET /two HTTP/1.1\r\nHost: h\r\n\r\n";
    expect(t.push(call("c", IO_READ, 0, r1, 100))).toEqual([]);
    const e1 = t.push(call("c", IO_WRITE, 0, resp(200, "a"), 150));
    expect(t.push(call("c", IO_READ, r1.length, r2, 200))).toEqual([]);
    const e2 = t.push(call("c", IO_WRITE, resp(200, "a").length, resp(404, "b"), 260));
    expect(e1.map((e) => [e.role, e.request.path, e.response.status, e.startNs, e.endNs])).toEqual([["server", "/one", 200, 100n, 150n]]);
    expect(e2.map((e) => [e.role, e.request.path, e.response.status, e.startNs, e.endNs])).toEqual([["server", "/two", 404, 200n, 260n]]);
  });

  test("client side: pipelined requests in one write are answered in order", () => {
    const t = new ExchangeTracker();
    const reqs = "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n";
    t.push(call("k", IO_WRITE, 0, reqs, 10));
    const out = t.push(call("k", IO_READ, 0, resp(200, "x") + resp(201, "y"), 30));
    expect(out.map((e) => [e.role, e.request.path, e.response.status])).toEqual([["client", "/1", 200], ["client", "/2", 201]]);
  });

  test("connections do not mix, 100 Continue is skipped, the table is bounded", () => {
    const t = new ExchangeTracker(2, 2);
    t.push(call("a", IO_READ, 0, "GET /a HTTP/1.1\r\n\r\n", 1));
    t.push(call("b", IO_READ, 0, "GET /b HTTP/1.1\r\n\r\n", 2));
    const cont = "HTTP/1.1 100 Continue\r\n\r\n";
    expect(t.push(call("b", IO_WRITE, 0, cont, 3))).toEqual([]);
    expect(t.push(call("b", IO_WRITE, cont.length, resp(200, ""), 4)).map((e) => e.request.path)).toEqual(["/b"]);
    expect(t.push(call("a", IO_WRITE, 0, resp(200, ""), 5)).map((e) => e.request.path)).toEqual(["/a"]);
    t.push(call("c", IO_READ, 0, "GET /c HTTP/1.1\r\n\r\n", 6));
    expect(t.size).toBe(2);
    t.push(call("d", IO_WRITE, 0, resp(200, ""), 7));
    expect(t.counters.orphanResponses).toBe(1);
  });
});
