import { describe, expect, test } from "bun:test";
import { STATUS_UNKNOWN, type HttpExchange } from "../../../../../src/collectors/network/http/parser";
import type { HttpRequestHead } from "../../../../../src/collectors/network/http/parser";
import type { Attributes } from "../../../../../src/export/types";
import { RouteTable, RouteTemplater } from "../../../../../src/collectors/network/http/routes";
import { DEFAULT_DURATION_BOUNDS_SECONDS, RedAggregator } from "../../../../../src/collectors/network/http/red";
import { Role } from "../../../../../src/collectors/network/red-maps";
import { exchangeToSpan, fullUrl, redactQuery, type EndpointMeta, type SpanContext } from "../../../../../src/collectors/network/http/spans";

const meta: EndpointMeta = { pid: 7, comm: "app", localAddress: "10.0.0.1", localPort: 8080, remoteAddress: "10.0.0.2", remotePort: 51000 };
const ctx = (o: Partial<SpanContext> = {}): SpanContext => ({ toEpochNs: (ns) => ns, describe: () => ({ attributes: { "process.pid": 7 }, resource: undefined }), ...o });

/** A span context's `route` as the network component gives it: the RED aggregator's (templates, heuristic, max routes). */
function routesOf(templates: string[], maxRoutes = 100, byService: Record<string, string[]> = {}): SpanContext["route"] {
  const red = new RedAggregator({
    routes: new RouteTemplater({ templates, byService, maxRoutes }),
    boundsSeconds: DEFAULT_DURATION_BOUNDS_SECONDS,
    describe: () => ({ name: "x", attributes: {}, resource: undefined }),
    path: () => undefined,
  });
  return (resource, path, truncated) => red.spanRoute(resource, path, truncated);
}

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
    const templates = ["/health", "/users/{id}", "/users/{id}/orders/{order}"];
    const route = routesOf(templates);
    const s = exchangeToSpan(exchange("server", "POST", "/users/42/orders/7?x=1"), ctx({ route }));
    expect(s.name).toBe("POST /users/{id}/orders/{order}");
    expect(s.attributes!["http.route"]).toBe("/users/{id}/orders/{order}");
    const table = new RouteTable(templates);
    expect(table.match("/users/")).toBeUndefined();
    expect(table.match("/users/1/x")).toBeUndefined();
    expect(table.match("/health")).toBe("/health");
    // Cut by the capture inside its path: a template still matches what was captured, as in the RED series, and
    // otherwise the last segment is {truncated}.
    const short = { truncated: "url", complete: false, version: undefined } as const;
    expect(exchangeToSpan(exchange("server", "GET", "/users/4", short), ctx({ route })).name).toBe("GET /users/{id}");
    const cut = exchangeToSpan(exchange("server", "GET", "/files/ab", short), ctx({ route }));
    expect(cut.name).toBe("GET /files/{truncated}");
    expect(cut.attributes).toMatchObject({ "svc.http.request.truncated": "url", "url.path": "/files/ab", "http.route": "/files/{truncated}" });
    expect(cut.attributes).not.toHaveProperty("network.protocol.version");
    // Cut inside its query: the path is whole.
    expect(exchangeToSpan(exchange("server", "GET", "/files/ab?sig=12", short), ctx({ route })).name).toBe("GET /files/ab");
    // Client spans have no route.
    expect(exchangeToSpan(exchange("client", "GET", "/users/42"), ctx({ route })).name).toBe("GET");
  });

  test("paths no template matches take the RED metrics' heuristic route; none once the service's routes are full", () => {
    const route = routesOf([], 100, { checkout: ["/carts/{cart}"] });
    const ids = exchangeToSpan(exchange("server", "GET", "/orders/12345/items/0f8fad5b-d9cb-469f-a165-70867728950e?x=1"), ctx({ route }));
    expect(ids.name).toBe("GET /orders/{id}/items/{uuid}");
    expect(ids.attributes!["http.route"]).toBe("/orders/{id}/items/{uuid}");
    // Templates per service apply to that service's spans.
    const checkout = ctx({ route, describe: () => ({ attributes: {}, resource: { "service.name": "checkout" } }) });
    expect(exchangeToSpan(exchange("server", "GET", "/carts/abc"), checkout).name).toBe("GET /carts/{cart}");
    expect(exchangeToSpan(exchange("server", "GET", "/carts/abc"), ctx({ route })).name).toBe("GET /carts/abc");
    // Paths longer than the kernel's path bytes: the route of their first 64 bytes, cut there.
    const long = `/files/${"a".repeat(80)}`;
    expect(exchangeToSpan(exchange("server", "GET", long), ctx({ route })).attributes!["http.route"]).toBe("/files/{truncated}");
    // A service whose routes are all taken: spans of new routes carry none (their counts go under {overflow}).
    const red = new RedAggregator({ routes: new RouteTemplater({ templates: [], maxRoutes: 1 }), boundsSeconds: DEFAULT_DURATION_BOUNDS_SECONDS, describe: () => ({ name: "x", attributes: {}, resource: undefined }), path: () => undefined });
    red.addExchange({ pid: 7, role: Role.SERVER, method: "GET", status: 200, peer: "", peerPort: 8080 }, "/a", 1e6);
    red.collect(1n, 2n);
    const full = ctx({ route: (resource, path, truncated) => red.spanRoute(resource, path, truncated) });
    expect(exchangeToSpan(exchange("server", "GET", "/a"), full).name).toBe("GET /a");
    const over = exchangeToSpan(exchange("server", "GET", "/b"), full);
    expect(over.name).toBe("GET");
    expect(over.attributes).not.toHaveProperty("http.route");
    // RED metrics off (nothing counted): spans take the routes themselves, at most maxRoutes of them.
    const alone = new RedAggregator({ routes: new RouteTemplater({ templates: [], maxRoutes: 1 }), boundsSeconds: DEFAULT_DURATION_BOUNDS_SECONDS, describe: () => ({ name: "x", attributes: {}, resource: undefined }), path: () => undefined });
    const uncounted = ctx({ route: (resource, path, truncated) => alone.spanRoute(resource, path, truncated, true) });
    expect(["/a", "/b", "/a"].map((p) => exchangeToSpan(exchange("server", "GET", p), uncounted).name)).toEqual(["GET /a", "GET", "GET /a"]);
    // Without a route source (no RED aggregator), no route.
    expect(exchangeToSpan(exchange("server", "GET", "/users/42"), ctx()).name).toBe("GET");
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
    const s = exchangeToSpan(exchange("server", "PROPFIND", "/dav/"), ctx({ route: routesOf(["/dav/"]) }));
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
    const route = routesOf(["/users/{id}", "/health"]);
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
      const c = ctx({ describe: () => ({ attributes: process, resource: undefined }), queryRedaction: pick(["all", "sensitive", "none"] as const), route });
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
