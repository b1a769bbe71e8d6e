import { describe, expect, test } from "bun:test";
import { HttpStreamParser, headEnd, looksLikeMessageStart, parseHead, parseHeadBytes, pathOfTarget, type HttpRequestHead, type HttpResponseHead } from "../../../../../src/collectors/network/http/parser";
import { ExchangeTracker, IO_READ, IO_WRITE } from "../../../../../src/collectors/network/http/exchanges";

const enc = (s: string) => new TextEncoder().encode(s);

/** Feeds whole calls (everything captured) in stream order; copies the messages (push refills its own at the next call). */
function feed(p: HttpStreamParser<number>, chunks: string[], startOffset = 0) {
  let off = startOffset;
  const out: Array<{ head: unknown; at: number }> = [];
  chunks.forEach((c, i) => {
    const b = enc(c);
    out.push(...p.push(off, b.length, b, i).map((m) => ({ ...m })));
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
    const m1 = p.push(0, head.length + 100000, head, 1).map((m) => ({ ...m })); // one write: head captured, body beyond the captured bytes
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
    /* Copied: push refills the array it returns at the next call. */
    const e1 = [...t.push(call("c", IO_WRITE, 0, resp(200, "a"), 150))];
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

describe("exchange tracker: the least recently used connection is the one evicted", () => {
  const req = (path: string) => enc(`GET ${path} HTTP/1.1\r\n\r\n`);
  /** One object refilled for every call, as the network collector does. */
  const shared = { connection: "", io: 0 as 0 | 1, timestampNs: 0n, streamOffset: 0, length: 0, data: new Uint8Array(0), meta: "" };
  const offsets = new Map<string, number>();
  const push = (t: ExchangeTracker<string>, connection: string, io: 0 | 1, data: Uint8Array, ts: number) => {
    const key = `${connection}/${io}`;
    Object.assign(shared, { connection, io, timestampNs: BigInt(ts), streamOffset: offsets.get(key) ?? 0, length: data.length, data, meta: `meta-${connection}-${ts}` });
    offsets.set(key, (offsets.get(key) ?? 0) + data.length);
    return t.push(shared).map((x) => [x.request.path, x.response.status, x.meta]);
  };

  test("calls repeated on one connection, calls alternating between connections, a closed connection coming back", () => {
    offsets.clear();
    const t = new ExchangeTracker<string>(3, 8);
    push(t, "a", IO_READ, req("/a1"), 1);
    push(t, "a", IO_READ, req("/a2"), 2);
    push(t, "b", IO_READ, req("/b1"), 3);
    push(t, "c", IO_READ, req("/c1"), 4);
    push(t, "c", IO_READ, req("/c2"), 5);
    /* a is used again: b is now the least recently used, and goes (its request unanswered) when d comes. */
    expect(push(t, "a", IO_WRITE, enc(resp(200, "")), 6)).toEqual([["/a1", 200, "meta-a-6"]]);
    push(t, "d", IO_READ, req("/d1"), 7);
    expect(t.size).toBe(3);
    expect(t.counters.unanswered).toBe(1);
    /* b comes back as a new connection (its response an orphan) and c, now the oldest, goes with two requests. */
    expect(push(t, "b", IO_WRITE, enc(resp(200, "")), 8)).toEqual([]);
    expect(t.counters.orphanResponses).toBe(1);
    expect(t.counters.unanswered).toBe(3);
    /* a again, then e: d is the oldest. */
    expect(push(t, "a", IO_WRITE, enc(resp(201, "")), 9)).toEqual([["/a2", 201, "meta-a-9"]]);
    push(t, "e", IO_READ, req("/e1"), 10);
    expect(t.counters.unanswered).toBe(4);
    expect(push(t, "d", IO_WRITE, enc(resp(202, "")), 11)).toEqual([]);
    expect(t.counters.orphanResponses).toBe(2);
    /* Closed, then seen again: a new connection, whatever the previous call was on; a is the oldest now. */
    t.close("d");
    offsets.delete("d/0");
    offsets.delete("d/1");
    push(t, "d", IO_READ, req("/d2"), 12);
    push(t, "f", IO_READ, req("/f1"), 13);
    expect(t.size).toBe(3);
    expect(push(t, "d", IO_WRITE, enc(resp(203, "")), 14)).toEqual([["/d2", 203, "meta-d-14"]]);
    expect(push(t, "a", IO_WRITE, enc(resp(200, "")), 15)).toEqual([]);
    expect(t.counters.orphanResponses).toBe(3);
    /* The client's exchanges carry the meta of the call that wrote the request; the reused call object kept nothing. */
    push(t, "g", IO_WRITE, req("/g1"), 16);
    expect(push(t, "g", IO_READ, enc(resp(200, "")), 17)).toEqual([["/g1", 200, "meta-g-16"]]);
  });
});

describe("heads parsed from the bytes", () => {
  /** Pieces heads are drawn from: valid and broken start lines, header names in any case and spacing, NBSP, windows-1252 bytes, odd line ends. */
  const STARTS = [
    "GET /a?x=1 HTTP/1.1", "POST /p HTTP/1.0", "PROPFIND /d HTTP/1.1", "GET /a b HTTP/1.1", "GET  /a HTTP/1.1", "GET /a HTTP/1.2", "GET /a HTTP/1.1 ",
    "GETX /a HTTP/1.1", "get /a HTTP/1.1", "DELETE http://u:p@h:1/x#f HTTP/1.1", "CONNECT h:443 HTTP/1.1", "GET /\xe9\x85\xa0 HTTP/1.1", "GET /a HTTP/1.1\r",
    "HTTP/1.1 200 OK", "HTTP/1.0 404 Not Found", "HTTP/1.1 204", "HTTP/1.1 2000 X", "HTTP/1.2 200 OK", "HTTP/1.1 20x OK", "HTTP/1.1  200", "HTTP/1.1 999 \xa0", "HTTP/1.",
  ];
  const NAMES = ["Host", "host", "HOST ", "User-Agent", "user-agent\t", "Content-Length", "content-length ", "Transfer-Encoding", "Connection", "\xa0Host", "Hostx", "Content-Type", "X-Thing", "Traceparent", "U", " Connection", "Upgrade", "UPGRADE\t"];
  const VALUES = ["", " ", "shop.local:8080", " [::1]:80 ", "17", " 0 ", "0017", "1234567890123456", "-1", "1e3", "chunked", "gzip, chunked", "gzip,CHUNKED\xa0", "chunked;q=1", "x-chunked", "close", "Keep-Alive, CLOSE", "cl\x85ose", "wrk/4.2", "\xa0kube-probe\xa0", "a:b:c", "\x85\xe9"];
  const ENDS = ["\r\n", "\n", "\r\r\n"];
  const FINAL = ["\r\n\r\n", "\n\n", "\n\r\n", "\r\n\r\r\n", "\n\r\r\r\n"];
  const latin1 = new TextDecoder("latin1" as "utf-8");

  /** Heads drawn from the pieces, and the pick they use: xorshift32 from a fixed seed, the same draw every run. */
  function drawer(seed: number): { pick: <T>(a: readonly T[]) => T; head: () => string } {
    const next = () => ((seed ^= seed << 13), (seed ^= seed >>> 17), (seed ^= seed << 5), seed >>> 0);
    const pick = <T>(a: readonly T[]): T => a[next() % a.length]!;
    const head = (): string => {
      let h = pick(STARTS);
      const lines = pick([0, 1, 2, 3, 5]);
      for (let l = 0; l < lines; l++) h += pick(ENDS) + (pick([0, 1, 2, 3, 4, 5, 6, 7]) === 0 ? "no colon here" : `${pick(NAMES)}:${pick(VALUES)}`);
      return h + pick(FINAL) + pick(["", "body", "GET / HTTP/1.1\r\n\r\n"]);
    };
    return { pick, head };
  }

  test("equal parseHead of the decoded text, for thousands of drawn heads", () => {
    const draw = drawer(0x9e3779b9);
    let requests = 0;
    let responses = 0;
    for (let n = 0; n < 5000; n++) {
      const head = draw.head();
      const bytes = Uint8Array.from(head, (c) => c.charCodeAt(0));
      const text = latin1.decode(bytes);
      const m = /\n\r*\n/.exec(text);
      const j = headEnd(bytes, 0);
      expect(j, JSON.stringify(head)).toBe(m ? m.index + m[0].length : -1);
      if (!m) continue;
      const expected = parseHead(text.slice(0, j).replace(/\r?\n\r?\n$/, ""), true);
      expect(parseHeadBytes(bytes, 0, j), JSON.stringify(head)).toEqual(expected);
      /* Also from an offset within a call. */
      const shifted = new Uint8Array(bytes.length + 3);
      shifted.set(bytes, 3);
      expect(parseHeadBytes(shifted, 3, j + 3), JSON.stringify(head)).toEqual(expected);
      if (expected?.head.kind === "request") requests++;
      if (expected?.head.kind === "response") responses++;
    }
    /* The draw covers both kinds, and heads that do not parse. */
    expect(requests).toBeGreaterThan(500);
    expect(responses).toBeGreaterThan(500);
  });

  test("with the line feeds headEnd found: the same heads, and every line feed of the head listed", () => {
    const draw = drawer(0x2545f491);
    const lineFeeds: number[] = [];
    let heads = 0;
    for (let n = 0; n < 5000; n++) {
      const head = draw.head();
      const from = draw.pick([0, 3]);
      const bytes = new Uint8Array(from + head.length);
      bytes.set(Uint8Array.from(head, (c) => c.charCodeAt(0)), from);
      lineFeeds.push(-1);
      const j = headEnd(bytes, from, lineFeeds);
      expect(j, JSON.stringify(head)).toBe(headEnd(bytes, from));
      if (j < 0) continue;
      const expected: number[] = [];
      for (let i = from; i < j; i++) if (bytes[i] === 10) expected.push(i);
      expect(lineFeeds, JSON.stringify(head)).toEqual(expected);
      expect(parseHeadBytes(bytes, from, j, lineFeeds), JSON.stringify(head)).toEqual(parseHeadBytes(bytes, from, j));
      heads++;
    }
    expect(heads).toBeGreaterThan(4000);
  });
});

describe("request targets and header values kept between heads", () => {
  const bytesOf = (s: string) => Uint8Array.from(s, (c) => c.charCodeAt(0));
  const parseRequest = (s: string) => {
    const b = bytesOf(s);
    return parseHeadBytes(b, 0, headEnd(b, 0))!.head as HttpRequestHead;
  };

  test("2,000 targets of one length and as many Host values, interleaved and repeated: each head gets its own", () => {
    /* 2,000 targets share far fewer slots: same-length targets collide, and each must still come back as its own. */
    const targets = Array.from({ length: 2000 }, (_, i) => `/items/${String(i).padStart(4, "0")}?q=${String(i * 7919 % 10000).padStart(4, "0")}`);
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < targets.length; i++) {
        const k = round === 1 ? targets.length - 1 - i : i;
        const host = `h${String(k).padStart(4, "0")}.local`;
        const head = parseRequest(`GET ${targets[k]} HTTP/1.1\r\nHost: ${host}\r\nUser-Agent: ua-${k % 3}\r\n\r\n`);
        expect(head.target).toBe(targets[k]!);
        expect(head.path).toBe(targets[k]!.slice(0, targets[k]!.indexOf("?")));
        expect(head.host).toBe(host);
        expect(head.userAgent).toBe(`ua-${k % 3}`);
      }
    }
  });

  test("targets with bytes 0x80-0x9f decode as windows-1252 every time, also once seen; a target over 256 bytes too", () => {
    const odd = "/caf\xe9/\x80\x9f";
    for (let i = 0; i < 3; i++) {
      const head = parseRequest(`GET ${odd} HTTP/1.1\r\n\r\n`);
      expect(head.target).toBe(new TextDecoder("latin1" as "utf-8").decode(bytesOf(odd)));
      expect(head.target.charCodeAt(head.target.length - 2)).toBe(0x20ac);
    }
    const long = `/${"x".repeat(300)}?a=1`;
    for (let i = 0; i < 2; i++) expect(parseRequest(`GET ${long} HTTP/1.1\r\n\r\n`)).toMatchObject({ target: long, path: long.slice(0, -4) });
  });
});
