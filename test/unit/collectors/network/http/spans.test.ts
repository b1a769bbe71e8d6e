import { describe, expect, test } from "bun:test";
import { STATUS_UNKNOWN, type HttpExchange } from "../../../../../src/collectors/network/http/parser";
import type { HttpRequestHead } from "../../../../../src/collectors/network/http/parser";
import type { Attributes } from "../../../../../src/export/types";
import { RouteTable, exchangeToSpan, fullUrl, redactQuery, type EndpointMeta, type SpanContext } from "../../../../../src/collectors/network/http/spans";

const meta: EndpointMeta = { pid: 7, comm: "app", localAddress: "10.0.0.1", localPort: 8080, remoteAddress: "10.0.0.2", remotePort: 51000 };
const ctx = (o: Partial<SpanContext> = {}): SpanContext => ({ toEpochNs: (ns) => ns, describe: () => ({ attributes: { "process.pid": 7 }, resource: undefined }), ...o });

function exchange(role: "server" | "client", method: string, target: string, o: Partial<HttpRequestHead> = {}, status = 200): HttpExchange<EndpointMeta> {
  const path = target.startsWith("/") ? target.split(/[?#]/)[0] : undefined;
  return {
    role,
    request: { kind: "request", method, target, path, version: "1.1", host: "api.local:8080", complete: true, ...o },
    response: { kind: "response", status, version: "1.1", complete: true },
    startNs: 1_000n,
    endNs: 5_000n,
    meta,
  };
}

describe("HTTP spans per the semantic conventions", () => {
  test("server span: name, url.scheme, url.path, redacted url.query, server/client addresses", () => {
    const s = exchangeToSpan(exchange("server", "GET", "/users/42?token=abc&debug", { userAgent: "curl/8.5.0" }), ctx());
    expect(s.name).toBe("GET");
    expect(s.kind).toBe(2);
    expect(s.attributes).toMatchObject({
      "http.request.method": "GET", "url.scheme": "http", "url.path": "/users/42", "url.query": "token=REDACTED&debug",
      "server.address": "api.local", "server.port": 8080, "client.address": "10.0.0.2", "client.port": 51000,
      "network.peer.address": "10.0.0.2", "network.protocol.version": "1.1", "http.response.status_code": 200, "user_agent.original": "curl/8.5.0",
    });
    expect(s.attributes).not.toHaveProperty("http.route");
    expect(s.attributes).not.toHaveProperty("url.full");
    expect(s.endTimeUnixNano - s.startTimeUnixNano).toBe(4_000n);
  });

  test("a status not known (an HTTP/2 stream decoded from a connection's middle): no status code, no error", () => {
    for (const role of ["server", "client"] as const) {
      const s = exchangeToSpan(exchange(role, "_OTHER", "/put", {}, STATUS_UNKNOWN), ctx());
      expect(s.attributes).not.toHaveProperty("http.response.status_code");
      expect(s.attributes).not.toHaveProperty("error.type");
      expect(s.attributes).not.toHaveProperty("http.request.method_original");
      expect(s.attributes!["http.request.method"]).toBe("_OTHER");
      expect(s.status?.code).toBe(0);
    }
  });

  test("a configured route template gives http.route and the name `{method} {route}`", () => {
    const routes = new RouteTable(["/health", "/users/{id}", "/users/{id}/orders/{order}"]);
    const s = exchangeToSpan(exchange("server", "POST", "/users/42/orders/7?x=1"), ctx({ routes }));
    expect(s.name).toBe("POST /users/{id}/orders/{order}");
    expect(s.attributes!["http.route"]).toBe("/users/{id}/orders/{order}");
    expect(routes.match("/users/")).toBeUndefined();
    expect(routes.match("/users/1/x")).toBeUndefined();
    expect(routes.match("/health")).toBe("/health");
    const cut = exchangeToSpan(exchange("server", "GET", "/users/4", { truncated: "url", complete: false, version: undefined }), ctx({ routes }));
    expect(cut.name).toBe("GET");
    expect(cut.attributes).toMatchObject({ "svc.http.request.truncated": "url", "url.path": "/users/4" });
    expect(cut.attributes).not.toHaveProperty("network.protocol.version");
  });

  test("client span: url.full from the Host header (or the peer), query values redacted by the configured rule", () => {
    const s = exchangeToSpan(exchange("client", "GET", "/s3/obj?AWSAccessKeyId=AK&Signature=xyz&part=2"), ctx());
    expect(s.kind).toBe(3);
    expect(s.attributes).toMatchObject({ "url.full": "http://api.local:8080/s3/obj?AWSAccessKeyId=REDACTED&Signature=REDACTED&part=REDACTED", "server.address": "api.local", "server.port": 8080, "url.scheme": "http" });
    const sensitive = exchangeToSpan(exchange("client", "GET", "/s3/obj?AWSAccessKeyId=AK&Signature=xyz&part=2"), ctx({ queryRedaction: "sensitive" }));
    expect(sensitive.attributes!["url.full"]).toBe("http://api.local:8080/s3/obj?AWSAccessKeyId=REDACTED&Signature=REDACTED&part=2");
    const none = exchangeToSpan(exchange("client", "GET", "/p?a=1", { host: undefined }), ctx({ queryRedaction: "none" }));
    expect(none.attributes).toMatchObject({ "url.full": "http://10.0.0.2:51000/p?a=1", "server.address": "10.0.0.2", "server.port": 51000 });
  });

  test("absolute-form targets keep their authority, user info always redacted; CONNECT names its authority", () => {
    expect(fullUrl("http://u:p@proxy.example/x?k=v#frag", undefined, "::1", 3128, "all")).toBe("http://REDACTED:REDACTED@proxy.example/x?k=REDACTED");
    expect(fullUrl("/x", undefined, "::1", 80, "all")).toBe("http://[::1]/x");
    expect(redactQuery("a=&b=2&c", "all")).toBe("a=REDACTED&b=REDACTED&c");
    const c = exchangeToSpan(exchange("client", "CONNECT", "db.internal:5432"), ctx());
    expect(c.attributes).toMatchObject({ "server.address": "db.internal", "server.port": 5432 });
    expect(c.attributes).not.toHaveProperty("url.full");
  });

  test("methods outside the conventions' set are _OTHER with the original, and the name is HTTP", () => {
    const s = exchangeToSpan(exchange("server", "PROPFIND", "/dav/"), ctx({ routes: new RouteTable(["/dav/"]) }));
    expect(s.name).toBe("HTTP /dav/");
    expect(s.attributes).toMatchObject({ "http.request.method": "_OTHER", "http.request.method_original": "PROPFIND" });
  });

  test("errors: 5xx on servers, 4xx and 5xx on clients", () => {
    expect(exchangeToSpan(exchange("server", "GET", "/", {}, 404), ctx()).status?.code).toBe(0);
    expect(exchangeToSpan(exchange("client", "GET", "/", {}, 404), ctx()).attributes!["error.type"]).toBe("404");
    expect(exchangeToSpan(exchange("server", "GET", "/", {}, 503), ctx()).status?.code).toBe(2);
  });
});

describe("agent.ebpf.network HTTP span keys", () => {
  test("defaults: every query value redacted, no route templates; bad values are refused naming the key", async () => {
    const { parseConfig } = await import("../../../../../src/config/load");
    const { ConfigError } = await import("../../../../../src/config/problems");
    const c = parseConfig("", {});
    expect(c.agent.ebpf.network.http_query_redaction).toBe("all");
    expect(c.agent.ebpf.network.http_routes).toEqual([]);
    let problems: string[] = [];
    try {
      parseConfig("agent:\n  ebpf:\n    network:\n      http_routes: [\"users/{id}\"]\n      http_query_redaction: some\n", {});
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      problems = e.problems.map((p) => p.path);
    }
    expect(problems.sort()).toEqual(["agent.ebpf.network.http_query_redaction", "agent.ebpf.network.http_routes[0]"]);
  });
});

describe("HTTP span attributes written straight by the encoder", () => {
  test("equal the attributes object encoded, for thousands of drawn exchanges and process attributes", async () => {
    const { writeAttributes } = await import("../../../../../src/export/encode");
    const { ProtoWriter } = await import("../../../../../src/export/wire");
    let seed = 0x5eed;
    const rnd = (n: number) => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 8) % n;
    const pick = <T>(xs: readonly T[]): T => xs[rnd(xs.length)]!;
    /* Process attributes as describe gives them, also some naming the span's own attributes or an array index (then the object is encoded). */
    const processes: Attributes[] = [
      { "process.pid": 7, "process.executable.name": "app" },
      { "process.pid": 42, "process.executable.name": "shop-server", "container.id": "4f5c1a7e" },
      { "process.pid": 9, "process.executable.name": "naïve-ünicode" },
      { "process.pid": 8, "url.scheme": "ftp" },
      { "process.pid": 8, "server.port": 1 },
      { "12": "index", "process.pid": 3 },
      {},
    ];
    /* Also connection endpoints as the network component keeps them (their attributes encoded once, whatever the role and field). */
    const { decodeHttpEvent } = await import("../../../../../src/collectors/network/decoders");
    const { httpRecord } = await import("../records");
    const endpointOf = (family: number, saddr: number[], daddr: number[]) => {
      const v = httpRecord({ ts: 1n, sk: 1n, off: 0, pid: 11, len: 1, io: 0, sport: 8443, dport: 40001, family, saddr, daddr, comm: "conn", data: "G" });
      return decodeHttpEvent(v, 0, v.byteLength).endpointOr(undefined);
    };
    const six = (last: number) => [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last];
    const metas: EndpointMeta[] = [meta, { pid: 9, comm: "c", localAddress: "2001:db8::1", localPort: 443, remoteAddress: "2001:db8::a", remotePort: 60000, tls: true }, endpointOf(2, [10, 1, 2, 3], [10, 1, 2, 4]), endpointOf(10, six(1), six(2))];
    const routes = new RouteTable(["/users/{id}", "/health"]);
    const targets = ["/users/42?token=abc&debug", "/health", "/", "/p?a=1&b=2#f", "http://user:pw@h.example:81/x?y=1", "db.internal:5432", "*", `/${"x".repeat(150)}?q=${"é".repeat(50)}`, "/k?ü=1&a", "/e?a=b=c&&d=&=x&", "/e?", "/f#?x=1", `/g?${"k=v&".repeat(30)}`];
    const hosts = [undefined, "api.local:8080", "[::1]:9090", "other", "ü.example"];
    const agents = [undefined, "curl/8.5.0", `long/${"a".repeat(130)}`];
    const a = new ProtoWriter(1024);
    const b = new ProtoWriter(1024);
    for (let i = 0; i < 5000; i++) {
      const x = exchange(pick(["server", "client"] as const), pick(["GET", "POST", "CONNECT", "PROPFIND", "HEAD"]), pick(targets), {
        host: pick(hosts),
        userAgent: pick(agents),
        version: pick(["1.1", "1.0", "2", undefined]),
        truncated: pick([undefined, undefined, "url", "headers"] as const),
      }, pick([200, 101, 301, 404, 500, 503]));
      x.meta = pick(metas);
      if (rnd(4) === 0) x.scheme = pick(["http", "https"]);
      const process = pick(processes);
      const c = ctx({ describe: () => ({ attributes: process, resource: undefined }), queryRedaction: pick(["all", "sensitive", "none"] as const), routes });
      const direct = exchangeToSpan(x, c);
      const viaObject = exchangeToSpan(x, c);
      const field = pick([9, 9, 9, 3]);
      a.reset();
      b.reset();
      direct.writeAttributes!(a, field);
      writeAttributes(b, field, viaObject.attributes);
      expect(Buffer.from(a.copy()).toString("hex")).toBe(Buffer.from(b.copy()).toString("hex"));
      /* Once read, the object is what is written. */
      a.reset();
      viaObject.writeAttributes!(a, field);
      expect(Buffer.from(a.copy()).toString("hex")).toBe(Buffer.from(b.copy()).toString("hex"));
    }
  });
});

test("a TLS connection's endpoint corrected after the span was made does not change the span (its addresses as of the exchange)", async () => {
  const { writeAttributes } = await import("../../../../../src/export/encode");
  const { ProtoWriter } = await import("../../../../../src/export/wire");
  const endpoint: EndpointMeta = { ...meta, tls: true };
  const x = { ...exchange("client", "GET", "/pay"), meta: endpoint };
  const span = exchangeToSpan(x, ctx());
  const before = exchangeToSpan({ ...x, meta: { ...endpoint } }, ctx()).attributes!;
  endpoint.remoteAddress = "10.9.9.9";
  endpoint.remotePort = 9443;
  const a = new ProtoWriter(256);
  const b = new ProtoWriter(256);
  span.writeAttributes!(a, 9);
  writeAttributes(b, 9, before);
  expect(Buffer.from(a.copy()).toString("hex")).toBe(Buffer.from(b.copy()).toString("hex"));
  expect(span.attributes).toMatchObject({ "network.peer.address": "10.0.0.2", "network.peer.port": 51000, "url.full": "https://api.local:8080/pay" });
});
