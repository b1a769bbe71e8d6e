/**
 * HTTP exchanges to OTLP spans per the OpenTelemetry HTTP semantic conventions: SERVER spans for processes that
 * read the request, CLIENT spans for processes that wrote it. Names are `{method} {http.route}` (server spans
 * whose path matches a configured route template) or `{method}` (`HTTP` for methods outside the standard set,
 * which are reported as `_OTHER` with `http.request.method_original`). Server spans carry `url.scheme`,
 * `url.path`, `url.query`, `client.address`; client spans `url.full`. Query values are redacted by the
 * configured rule (`agent.ebpf.network.http_query_redaction`); user info in a URL always is. A request cut by
 * the capture carries `svc.http.request.truncated` ("url": path and query are the captured prefix; "headers").
 */
import type { Attributes } from "../../../export/types";
import { SpanKind, StatusCode, type Scope, type SpanItem } from "../../../export/model";
import type { HttpExchange } from "./parser";

/** What the kernel sees: plaintext HTTP/1.x on TCP sockets. */
const URL_SCHEME = "http";
/** What the TLS uprobes see: the plaintext of TLS connections. */
const TLS_URL_SCHEME = "https";
export const REDACTED = "REDACTED";
/** Methods the conventions know (HTTP semantic conventions, http.request.method). */
const KNOWN_METHODS = new Set(["CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "QUERY", "TRACE"]);
/** Query keys whose values the conventions say to redact by default (url.query, url.full). */
export const SENSITIVE_QUERY_KEYS: readonly string[] = ["AWSAccessKeyId", "Signature", "sig", "X-Goog-Signature"];
const SENSITIVE_KEY_SET = new Set(SENSITIVE_QUERY_KEYS);

/** Which query values are replaced by REDACTED: every one, those of SENSITIVE_QUERY_KEYS, or none. */
export type QueryRedaction = "all" | "sensitive" | "none";

/** The endpoint of a captured call, as the kernel saw it. */
export interface EndpointMeta {
  pid: number;
  comm: string;
  localAddress: string;
  localPort: number;
  remoteAddress: string;
  remotePort: number;
  /** The bytes are the plaintext of a TLS connection (read at the TLS library): url.scheme https. */
  tls?: boolean;
}

export interface SpanContext {
  toEpochNs(monotonicNs: bigint): bigint;
  /** Process attributes and workload resource of a pid. */
  describe(pid: number, comm: string): { attributes: Attributes; resource: Attributes | undefined };
  scope?: Scope;
  /** Query value redaction (default "all"). */
  queryRedaction?: QueryRedaction;
  /** Route templates of server spans (http.route), first match wins. */
  routes?: RouteTable;
}

const ID_POOL_BYTES = 24 * 1024;
let idPool = new Uint8Array(0);
let idPoolAt = 0;

/**
 * `n` random bytes from a pool refilled with crypto.getRandomValues (one call per ~1000 spans), copied into an
 * array of their own (cheaper than a view of the pool).
 */
export function randomId(n: number): Uint8Array {
  if (idPoolAt + n > idPool.length) {
    idPool = crypto.getRandomValues(new Uint8Array(ID_POOL_BYTES));
    idPoolAt = 0;
  }
  const id = new Uint8Array(n);
  const pool = idPool;
  for (let i = 0, at = idPoolAt; i < n; i++) id[i] = pool[at + i]!;
  idPoolAt += n;
  return id;
}

const HOST_CACHE_ENTRIES = 1024;
/** Results of splitHost by Host header (a service sees few): read-only objects, emptied when full. */
const hostCache = new Map<string, { readonly address: string; readonly port: number | undefined }>();

/** Host and port of a Host header ("h", "h:8080", "[::1]:8080"). The same object for the same header while cached: do not modify. */
export function splitHost(host: string): { readonly address: string; readonly port: number | undefined } {
  let r = hostCache.get(host);
  if (r === undefined) {
    if (hostCache.size >= HOST_CACHE_ENTRIES) hostCache.clear();
    hostCache.set(host, (r = parseHost(host)));
  }
  return r;
}

function parseHost(host: string): { address: string; port: number | undefined } {
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(host) ?? /^([^:]+)(?::(\d+))?$/.exec(host);
  if (!m) return { address: host, port: undefined };
  return { address: m[1]!, port: m[2] ? Number(m[2]) : undefined };
}

/** Each value of a query: from its part's first "=" to the part's end ("&" or the end of the query). */
const QUERY_VALUES = /=[^&]*/g;
const REDACTED_VALUE = `=${REDACTED}`;

/** The query with values redacted by `rule` ("a=1&b" -> "a=REDACTED&b" for "all"). */
export function redactQuery(query: string, rule: QueryRedaction): string {
  if (rule === "none" || query === "") return query;
  /* One replace: a flat string (the loop below builds a rope of its parts, flattened again when encoded). */
  if (rule === "all") return query.replace(QUERY_VALUES, REDACTED_VALUE);
  /* Part by part ("&"-separated): a part with "=" keeps its key and "=", its value replaced. */
  let out = "";
  let from = 0;
  for (;;) {
    let to = query.indexOf("&", from);
    if (to < 0) to = query.length;
    const eq = query.indexOf("=", from);
    if (eq < 0 || eq >= to || (rule === "sensitive" && !SENSITIVE_KEY_SET.has(query.slice(from, eq)))) out += query.slice(from, to);
    else out += query.slice(from, eq + 1) + REDACTED;
    if (to === query.length) return out;
    out += "&";
    from = to + 1;
  }
}

/** Splits a request target into its path-and-authority part and its query (fragment dropped). */
function splitTarget(target: string): { base: string; query: string | undefined } {
  const hash = target.indexOf("#");
  const t = hash < 0 ? target : target.slice(0, hash);
  const q = t.indexOf("?");
  return q < 0 ? { base: t, query: undefined } : { base: t.slice(0, q), query: t.slice(q + 1) };
}

/** The query of a request target (splitTarget's, without building the base). */
function queryOf(target: string): string | undefined {
  const hash = target.indexOf("#");
  const end = hash < 0 ? target.length : hash;
  const q = target.indexOf("?");
  return q < 0 || q >= end ? undefined : target.slice(q + 1, end);
}

/** url.full of a client request: absolute-form targets as sent, others from the Host header or the peer address. */
export function fullUrl(target: string, host: string | undefined, remoteAddress: string, remotePort: number, rule: QueryRedaction, urlScheme = URL_SCHEME): string {
  const { base, query } = splitTarget(target);
  let prefix: string;
  let rest: string;
  const scheme = /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\//.exec(base);
  if (scheme) {
    const authorityEnd = base.indexOf("/", scheme[0].length);
    const authority = authorityEnd < 0 ? base.slice(scheme[0].length) : base.slice(scheme[0].length, authorityEnd);
    const at = authority.lastIndexOf("@");
    prefix = scheme[0] + (at < 0 ? authority : `${REDACTED}:${REDACTED}@${authority.slice(at + 1)}`);
    rest = authorityEnd < 0 ? "" : base.slice(authorityEnd);
  } else {
    const peer = remoteAddress.includes(":") ? `[${remoteAddress}]` : remoteAddress;
    const defaultPort = urlScheme === TLS_URL_SCHEME ? 443 : 80;
    prefix = `${urlScheme}://${host ?? (remotePort === defaultPort ? peer : `${peer}:${remotePort}`)}`;
    rest = base;
  }
  return query === undefined ? prefix + rest : `${prefix}${rest}?${redactQuery(query, rule)}`;
}

/** Route templates ("/users/{id}/orders"): `{name}` stands for one non-empty path segment. */
export class RouteTable {
  readonly #routes: Array<{ template: string; segments: Array<string | null> }>;

  constructor(templates: readonly string[]) {
    this.#routes = templates.map((template) => ({ template, segments: template.split("/").map((seg) => (/^\{[^/{}]+\}$/.test(seg) ? null : seg)) }));
  }

  /** The first template matching `path`, or undefined. */
  match(path: string): string | undefined {
    if (this.#routes.length === 0) return undefined;
    const parts = path.split("/");
    for (const r of this.#routes) {
      if (r.segments.length !== parts.length) continue;
      let ok = true;
      for (let i = 0; i < parts.length && ok; i++) {
        const seg = r.segments[i];
        ok = seg === null ? parts[i] !== "" : seg === parts[i];
      }
      if (ok) return r.template;
    }
    return undefined;
  }
}

/** gRPC status codes a server reports as errors (RPC semantic conventions, gRPC): UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS. */
const GRPC_SERVER_ERRORS = new Set([2, 4, 12, 13, 14, 15]);

/** Whether a gRPC call ended in error for the side that reports it (clients: any status but OK; no status at all is one too). */
export function grpcIsError(server: boolean, code: number | undefined): boolean {
  if (code === undefined) return true;
  return server ? GRPC_SERVER_ERRORS.has(code) : code !== 0;
}

/**
 * url.scheme of a gRPC call: the request's `:scheme`, else https for TLS plaintext. The RPC conventions name no
 * attribute saying whether a call was encrypted; url.scheme says it as it does for HTTP spans.
 */
export function rpcUrlScheme(x: HttpExchange<EndpointMeta>): string {
  return x.scheme ?? (x.meta.tls ? TLS_URL_SCHEME : URL_SCHEME);
}

/** A gRPC call as an RPC span (RPC semantic conventions): `{service}/{method}`, rpc.* attributes. */
function rpcSpan(x: HttpExchange<EndpointMeta>, c: SpanContext): SpanItem {
  const m = x.meta;
  const rpc = x.rpc!;
  const server = x.role === "server";
  const who = c.describe(m.pid, m.comm);
  const host = x.request.host ? splitHost(x.request.host) : undefined;
  const attributes: Attributes = {
    ...who.attributes,
    "rpc.system": rpc.system,
    "rpc.service": rpc.service,
    "rpc.method": rpc.method,
    "network.protocol.name": "http",
    "network.protocol.version": "2",
    "network.transport": "tcp",
    "url.scheme": rpcUrlScheme(x),
    "network.peer.address": m.remoteAddress,
    "network.peer.port": m.remotePort,
    "network.local.address": m.localAddress,
    "network.local.port": m.localPort,
    "server.address": server ? (host?.address ?? m.localAddress) : (host?.address ?? m.remoteAddress),
    "server.port": server ? (host?.port ?? m.localPort) : (host?.port ?? m.remotePort),
  };
  if (rpc.statusCode !== undefined) attributes["rpc.grpc.status_code"] = rpc.statusCode;
  if (server) {
    attributes["client.address"] = m.remoteAddress;
    attributes["client.port"] = m.remotePort;
  }
  const error = grpcIsError(server, rpc.statusCode);
  if (error) attributes["error.type"] = rpc.statusCode === undefined ? "_OTHER" : String(rpc.statusCode);
  return exchangeSpan(x, c, `${rpc.service}/${rpc.method}`, server, attributes, error, who.resource);
}

/** The status of every exchange span: shared, read-only. */
const STATUS_ERROR = Object.freeze({ code: StatusCode.ERROR });
const STATUS_UNSET = Object.freeze({ code: StatusCode.UNSET });

/** The span of an exchange, from its start to its end, once its name and attributes are known. */
function exchangeSpan(x: HttpExchange<EndpointMeta>, c: SpanContext, name: string, server: boolean, attributes: Attributes, error: boolean, resource: Attributes | undefined): SpanItem {
  const span: SpanItem = {
    traceId: randomId(16),
    spanId: randomId(8),
    name,
    kind: server ? SpanKind.SERVER : SpanKind.CLIENT,
    startTimeUnixNano: c.toEpochNs(x.startNs),
    endTimeUnixNano: c.toEpochNs(x.endNs > x.startNs ? x.endNs : x.startNs),
    attributes,
    status: error ? STATUS_ERROR : STATUS_UNSET,
  };
  if (c.scope) span.scope = c.scope;
  if (resource) span.resource = resource;
  return span;
}

export function exchangeToSpan(x: HttpExchange<EndpointMeta>, c: SpanContext): SpanItem {
  if (x.rpc) return rpcSpan(x, c);
  const m = x.meta;
  const server = x.role === "server";
  const who = c.describe(m.pid, m.comm);
  const req = x.request;
  const rule = c.queryRedaction ?? "all";
  const host = req.host ? splitHost(req.host) : undefined;
  const known = KNOWN_METHODS.has(req.method);
  // HTTP/2 says its scheme (:scheme); otherwise the capture tells: TLS plaintext is https.
  const scheme = x.scheme ?? (m.tls ? TLS_URL_SCHEME : URL_SCHEME);
  const attributes: Attributes = {
    ...who.attributes,
    "http.request.method": known ? req.method : "_OTHER",
    "http.response.status_code": x.response.status,
    "network.protocol.name": "http",
    "network.transport": "tcp",
    "network.peer.address": m.remoteAddress,
    "network.peer.port": m.remotePort,
    "url.scheme": scheme,
  };
  if (!known) attributes["http.request.method_original"] = req.method;
  if (req.version !== undefined) attributes["network.protocol.version"] = req.version;
  if (req.truncated) attributes["svc.http.request.truncated"] = req.truncated;
  if (req.userAgent !== undefined) attributes["user_agent.original"] = req.userAgent;
  let route: string | undefined;
  if (server) {
    const query = queryOf(req.target);
    if (req.path !== undefined) attributes["url.path"] = req.path;
    if (query !== undefined) attributes["url.query"] = redactQuery(query, rule);
    if (req.path !== undefined && req.truncated !== "url") route = c.routes?.match(req.path);
    if (route !== undefined) attributes["http.route"] = route;
    attributes["server.address"] = host?.address ?? m.localAddress;
    attributes["server.port"] = host?.port ?? m.localPort;
    attributes["client.address"] = m.remoteAddress;
    attributes["client.port"] = m.remotePort;
    attributes["network.local.address"] = m.localAddress;
    attributes["network.local.port"] = m.localPort;
  } else {
    if (req.method === "CONNECT") {
      const authority = splitHost(req.target);
      attributes["server.address"] = authority.address;
      attributes["server.port"] = authority.port ?? m.remotePort;
    } else {
      attributes["url.full"] = fullUrl(req.target, req.host, m.remoteAddress, m.remotePort, rule, scheme);
      if (req.path !== undefined) attributes["url.path"] = req.path;
      attributes["server.address"] = host?.address ?? m.remoteAddress;
      attributes["server.port"] = host?.port ?? m.remotePort;
    }
    attributes["network.local.address"] = m.localAddress;
    attributes["network.local.port"] = m.localPort;
  }
  const status = x.response.status;
  const error = status >= 500 || (!server && status >= 400);
  if (error) attributes["error.type"] = String(status);
  const method = known ? req.method : "HTTP";
  return exchangeSpan(x, c, route !== undefined ? `${method} ${route}` : method, server, attributes, error, who.resource);
}
