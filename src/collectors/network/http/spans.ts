/**
 * HTTP exchanges to OTLP spans per the OpenTelemetry HTTP semantic conventions: SERVER spans for processes that
 * read the request, CLIENT spans for processes that wrote it. Names are `{method} {http.route}` (server spans whose
 * path has a route: the one its RED series carries, routes.ts) or `{method}` (`HTTP` for methods outside the
 * standard set, which are reported as `_OTHER` with `http.request.method_original`). Server spans carry `url.scheme`,
 * `url.path`, `url.query`, `client.address`; client spans `url.full`. Query values are redacted by the
 * configured rule (`agent.ebpf.network.http_query_redaction`); user info in a URL always is. A request cut by
 * the capture carries `svc.http.request.truncated` ("url": path and query are the captured prefix; "headers").
 * A request that carried a valid W3C `traceparent` puts its spans in the caller's trace (trace-context.ts).
 */
import type { AttributeValue, Attributes } from "../../../export/types";
import { SpanKind, StatusCode, type Scope, type SpanItem, type SpanKindValue, type StatusCodeValue } from "../../../export/model";
import { beginShortStringKeyValue, encodeAttributeFields, keyField, writeAttributes, writeKeyValue, type KeyField } from "../../../export/encode";
import { ProtoWriter } from "../../../export/wire";
import { HttpEndpoint } from "../decoders";
import { STATUS_UNKNOWN, type HttpExchange } from "./parser";
import { parseTraceparent, spanFlagsOf } from "./trace-context";

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
  /**
   * http.route of a server span whose path is `path` (cut by the capture inside its last segment when `truncated`),
   * under the workload `resource`: the route of the RED series that counts it (RedAggregator.spanRoute), or
   * undefined (no http.route, the span named `{method}`).
   */
  route?: (resource: Attributes | undefined, path: string, truncated: boolean) => string | undefined;
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

/** Where the query of a request target starts (after its "?"; splitTarget's query), or -1 when it has none. */
function queryStart(target: string): number {
  const q = target.indexOf("?");
  if (q < 0) return -1;
  const hash = target.indexOf("#");
  return hash >= 0 && hash < q ? -1 : q + 1;
}

/** Where the query of a request target that has one (queryStart) ends: at its fragment, or the target's end. */
function queryEnd(target: string): number {
  const hash = target.indexOf("#");
  return hash < 0 ? target.length : hash;
}

const EQUALS = 61;
const AMPERSAND = 38;

/**
 * Writes the KeyValue of `target[from..to)` redacted by rule "all" (redactQuery's), without building the string;
 * false, with nothing written, when a character outside the values is not ASCII or the KeyValue is too long for
 * writeShortKeyValue (the caller then writes redactQuery's string).
 */
function writeQueryRedactedAll(w: ProtoWriter, field: number, key: KeyField, target: string, from: number, to: number): boolean {
  /* Every value (from "=" to the next "&") becomes "=REDACTED". */
  let n = 0;
  for (let i = from; i < to; i++) {
    const c = target.charCodeAt(i);
    if (c === EQUALS) {
      n += REDACTED_VALUE.length;
      while (i + 1 < to && target.charCodeAt(i + 1) !== AMPERSAND) i++;
    } else if (c >= 0x80) return false;
    else n++;
  }
  let p = beginShortStringKeyValue(w, field, key, n);
  if (p < 0) return false;
  const b = w.buf;
  for (let i = from; i < to; i++) {
    const c = target.charCodeAt(i);
    if (c === EQUALS) {
      for (let j = 0; j < REDACTED_VALUE.length; j++) b[p++] = REDACTED_VALUE.charCodeAt(j);
      while (i + 1 < to && target.charCodeAt(i + 1) !== AMPERSAND) i++;
    } else b[p++] = c;
  }
  return true;
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

/** gRPC status codes a server reports as errors (RPC semantic conventions, gRPC): UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS. */
const GRPC_SERVER_ERRORS = new Set([2, 4, 12, 13, 14, 15]);

/**
 * Whether a gRPC call ended in error for the side that reports it (clients: any status but OK; no status at all is
 * one too; a status not known, STATUS_UNKNOWN, is none).
 */
export function grpcIsError(server: boolean, code: number | undefined): boolean {
  if (code === undefined) return true;
  if (code === STATUS_UNKNOWN) return false;
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
  if (rpc.statusCode !== undefined && rpc.statusCode !== STATUS_UNKNOWN) attributes["rpc.grpc.status_code"] = rpc.statusCode;
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
  const parent = x.request.traceparent !== undefined ? parseTraceparent(x.request.traceparent) : undefined;
  const span: SpanItem = {
    traceId: parent?.traceId ?? randomId(16),
    spanId: randomId(8),
    name,
    kind: server ? SpanKind.SERVER : SpanKind.CLIENT,
    startTimeUnixNano: c.toEpochNs(x.startNs),
    endTimeUnixNano: c.toEpochNs(x.endNs > x.startNs ? x.endNs : x.startNs),
    attributes,
    status: error ? STATUS_ERROR : STATUS_UNSET,
  };
  if (parent) {
    span.parentSpanId = parent.parentId;
    span.flags = spanFlagsOf(parent, server);
  }
  if (c.scope) span.scope = c.scope;
  if (resource) span.resource = resource;
  return span;
}

/** An attribute's name and its encoded KeyValue.key field. */
interface Key {
  readonly name: string;
  readonly field: KeyField;
}
const key = (name: string): Key => ({ name, field: keyField(name) });

/** Attributes every HTTP/1.x and HTTP/2 span carries with the same values, one after the other. */
const HTTP_OVER_TCP: Attributes = Object.freeze({ "network.protocol.name": "http", "network.transport": "tcp" });

/** The attributes of HTTP spans (not gRPC), in the order the spans carry them after the process attributes. */
const K = {
  method: key("http.request.method"),
  status: key("http.response.status_code"),
  peerAddress: key("network.peer.address"),
  peerPort: key("network.peer.port"),
  urlScheme: key("url.scheme"),
  methodOriginal: key("http.request.method_original"),
  protocolVersion: key("network.protocol.version"),
  truncated: key("svc.http.request.truncated"),
  userAgent: key("user_agent.original"),
  urlPath: key("url.path"),
  urlQuery: key("url.query"),
  route: key("http.route"),
  serverAddress: key("server.address"),
  serverPort: key("server.port"),
  clientAddress: key("client.address"),
  clientPort: key("client.port"),
  localAddress: key("network.local.address"),
  localPort: key("network.local.port"),
  urlFull: key("url.full"),
  errorType: key("error.type"),
} as const;
const HTTP_KEY_NAMES = new Set([...Object.values(K).map((k) => k.name), ...Object.keys(HTTP_OVER_TCP)]);

/** Where an HTTP span's attributes go: into an object, or written as KeyValue fields. */
interface AttributeSink {
  put(k: Key, v: AttributeValue): void;
  /** The query target[from..to) redacted by `rule`. */
  putQuery(k: Key, target: string, from: number, to: number, rule: QueryRedaction): void;
  /** Every attribute of `a`, in order (a constant object: its fields are encoded once). */
  putConstant(a: Attributes): void;
  /** The attributes a span's connection gives it (putConnectionAttributes). */
  putConnection(m: EndpointMeta, c: ConnectionFields): void;
}

/**
 * What a span's attributes take from its connection besides the endpoint: its role, and the request fields a
 * connection repeats from request to request (the scheme, the protocol version, User-Agent and Host).
 */
interface ConnectionFields {
  server: boolean;
  scheme: string;
  version: string | undefined;
  userAgent: string | undefined;
  host: string | undefined;
  /** A CONNECT request: server.address and server.port come from its target (written apart). */
  connect: boolean;
}

/**
 * The attributes a span takes from its connection, in order: network.peer.*, client.* (server spans) and
 * network.local.* of the endpoint, url.scheme, network.protocol.version, user_agent.original, and server.address
 * and server.port (from Host, else the endpoint; not for CONNECT).
 */
function putConnectionAttributes(s: AttributeSink, m: EndpointMeta, c: ConnectionFields): void {
  s.put(K.peerAddress, m.remoteAddress);
  s.put(K.peerPort, m.remotePort);
  if (c.server) {
    s.put(K.clientAddress, m.remoteAddress);
    s.put(K.clientPort, m.remotePort);
  }
  s.put(K.localAddress, m.localAddress);
  s.put(K.localPort, m.localPort);
  s.put(K.urlScheme, c.scheme);
  if (c.version !== undefined) s.put(K.protocolVersion, c.version);
  if (c.userAgent !== undefined) s.put(K.userAgent, c.userAgent);
  if (c.connect) return;
  const host = c.host ? splitHost(c.host) : undefined;
  s.put(K.serverAddress, host?.address ?? (c.server ? m.localAddress : m.remoteAddress));
  s.put(K.serverPort, host?.port ?? (c.server ? m.localPort : m.remotePort));
}

/** A connection's attributes as KeyValue fields, kept on its endpoint (HttpEndpoint.spanCache) for its next spans with the same fields. */
interface EncodedConnection extends ConnectionFields {
  readonly field: number;
  readonly bytes: Uint8Array;
}

class ObjectSink implements AttributeSink {
  constructor(readonly out: Attributes) {}
  put(k: Key, v: AttributeValue): void {
    this.out[k.name] = v;
  }
  putQuery(k: Key, target: string, from: number, to: number, rule: QueryRedaction): void {
    this.out[k.name] = redactQuery(target.slice(from, to), rule);
  }
  putConstant(a: Attributes): void {
    for (const name in a) this.out[name] = a[name]!;
  }
  putConnection(m: EndpointMeta, c: ConnectionFields): void {
    putConnectionAttributes(this, m, c);
  }
}

class WriterSink implements AttributeSink {
  w: ProtoWriter | undefined;
  field = 0;
  put(k: Key, v: AttributeValue): void {
    writeKeyValue(this.w!, this.field, k.field, v);
  }
  putQuery(k: Key, target: string, from: number, to: number, rule: QueryRedaction): void {
    if (rule === "all" && writeQueryRedactedAll(this.w!, this.field, k.field, target, from, to)) return;
    writeKeyValue(this.w!, this.field, k.field, redactQuery(target.slice(from, to), rule));
  }
  putConstant(a: Attributes): void {
    this.w!.raw(encodedFieldsOf(a, this.field).bytes);
  }
  /**
   * A connection's endpoint (HttpEndpoint: one object while its records say the same, never changed) keeps its
   * attributes encoded for the last fields seen, copied into each span with the same fields; other endpoints (TLS
   * ones, whose addresses may be corrected) are written attribute by attribute.
   */
  putConnection(m: EndpointMeta, c: ConnectionFields): void {
    if (!(m instanceof HttpEndpoint)) {
      putConnectionAttributes(this, m, c);
      return;
    }
    let e = m.spanCache as EncodedConnection | undefined;
    if (e === undefined || e.field !== this.field || e.server !== c.server || e.scheme !== c.scheme || e.version !== c.version || e.userAgent !== c.userAgent || e.host !== c.host || e.connect !== c.connect) {
      const sink = CONNECTION_SINK;
      (sink.w ??= new ProtoWriter(512)).reset();
      sink.field = this.field;
      putConnectionAttributes(sink, m, c);
      m.spanCache = e = { ...c, field: this.field, bytes: sink.w.copy() };
    }
    this.w!.raw(e.bytes);
  }
}

/** The sink a connection's attributes are encoded with before a copy is kept (WriterSink.putConnection; its writer reused). */
const CONNECTION_SINK = new WriterSink();

/** One writer sink for every span (encoding runs on one thread, never re-entrantly). */
const WRITER_SINK = new WriterSink();

/**
 * Attribute objects that do not change (constants, and describe's process attributes: one object per process) as
 * KeyValue fields, encoded once per object; `separate` when none of their names is one of the span's own nor an
 * array index (process attributes' fields then simply come first, as the spread object's keys do; otherwise the
 * span's attributes are written from the object).
 */
const encodedFields = new WeakMap<Attributes, { field: number; bytes: Uint8Array; separate: boolean }>();

function encodedFieldsOf(attributes: Attributes, field: number): { bytes: Uint8Array; separate: boolean } {
  let f = encodedFields.get(attributes);
  if (f === undefined || f.field !== field) {
    const names = Object.keys(attributes);
    const separate = names.every((n) => !HTTP_KEY_NAMES.has(n) && !/^(0|[1-9]\d*)$/.test(n));
    encodedFields.set(attributes, (f = { field, bytes: encodeAttributeFields(field, attributes), separate }));
  }
  return f;
}

/**
 * An HTTP/1.x or HTTP/2 (not gRPC) exchange's span. Its attributes are written by the encoder straight from the
 * exchange (writeAttributes), the process attributes as bytes encoded once per process; `attributes` builds the
 * same attributes as an object when read (then the encoder writes that object).
 */
class HttpSpan implements SpanItem {
  /** Set again, with parentSpanId and flags, when the span is linked to its client's (local-links.ts). */
  traceId: Uint8Array;
  readonly spanId: Uint8Array;
  readonly name: string;
  readonly kind: SpanKindValue;
  readonly startTimeUnixNano: bigint;
  readonly endTimeUnixNano: bigint;
  readonly status: { code: StatusCodeValue };
  /* Set in the constructor whatever the request carried (one object shape for every span, as the encoder reads them). */
  parentSpanId: Uint8Array | undefined;
  flags: number | undefined;
  declare scope?: Scope;
  declare resource?: Attributes;
  readonly #x: HttpExchange<EndpointMeta>;
  /**
   * The exchange's endpoint as it was when the span was made: a TLS connection's endpoint is one object for all its
   * calls, whose addresses may be corrected later (component.ts #tlsEndpoint), so it is copied; a record is not.
   */
  readonly #meta: EndpointMeta;
  readonly #process: Attributes;
  readonly #rule: QueryRedaction;
  readonly #scheme: string;
  readonly #route: string | undefined;
  #attributes: Attributes | undefined;

  constructor(x: HttpExchange<EndpointMeta>, c: SpanContext, process: Attributes, rule: QueryRedaction, scheme: string, route: string | undefined, name: string, server: boolean, error: boolean) {
    /* A request that carried the caller's trace context joins its trace (the caller's span as parent, remote for a
     * server; for a client, the span its own process made for the call). */
    const parent = x.request.traceparent !== undefined ? parseTraceparent(x.request.traceparent) : undefined;
    this.traceId = parent?.traceId ?? randomId(16);
    this.spanId = randomId(8);
    this.parentSpanId = parent?.parentId;
    this.flags = parent ? spanFlagsOf(parent, server) : undefined;
    this.name = name;
    this.kind = server ? SpanKind.SERVER : SpanKind.CLIENT;
    this.startTimeUnixNano = c.toEpochNs(x.startNs);
    this.endTimeUnixNano = c.toEpochNs(x.endNs > x.startNs ? x.endNs : x.startNs);
    this.status = error ? STATUS_ERROR : STATUS_UNSET;
    this.#x = x;
    this.#meta = x.meta.tls ? { ...x.meta } : x.meta;
    this.#process = process;
    this.#rule = rule;
    this.#scheme = scheme;
    this.#route = route;
  }

  get attributes(): Attributes {
    if (this.#attributes === undefined) {
      const out: Attributes = { ...this.#process };
      putHttpAttributes(new ObjectSink(out), this.#x, this.#meta, this.#rule, this.#scheme, this.#route);
      this.#attributes = out;
    }
    return this.#attributes;
  }

  set attributes(a: Attributes) {
    this.#attributes = a;
  }

  writeAttributes(w: ProtoWriter, field: number): void {
    const p = encodedFieldsOf(this.#process, field);
    if (this.#attributes !== undefined || !p.separate) {
      writeAttributes(w, field, this.attributes);
      return;
    }
    w.raw(p.bytes);
    const sink = WRITER_SINK;
    sink.w = w;
    sink.field = field;
    try {
      putHttpAttributes(sink, this.#x, this.#meta, this.#rule, this.#scheme, this.#route);
    } finally {
      sink.w = undefined;
    }
  }
}

/** The attributes of an HTTP span after the process attributes, in order, into `s`. */
function putHttpAttributes(s: AttributeSink, x: HttpExchange<EndpointMeta>, m: EndpointMeta, rule: QueryRedaction, scheme: string, route: string | undefined): void {
  const server = x.role === "server";
  const req = x.request;
  const known = KNOWN_METHODS.has(req.method);
  const connect = !server && req.method === "CONNECT";
  s.put(K.method, known ? req.method : "_OTHER");
  if (x.response.status !== STATUS_UNKNOWN) s.put(K.status, x.response.status);
  s.putConstant(HTTP_OVER_TCP);
  const c = CONNECTION_FIELDS;
  c.server = server;
  c.scheme = scheme;
  c.version = req.version;
  c.userAgent = req.userAgent;
  c.host = req.host;
  c.connect = connect;
  s.putConnection(m, c);
  /* `_OTHER` itself: a method not known to the agent either (an HTTP/2 connection decoded from its middle). */
  if (!known && req.method !== "_OTHER") s.put(K.methodOriginal, req.method);
  if (req.truncated) s.put(K.truncated, req.truncated);
  if (server) {
    const query = queryStart(req.target);
    if (req.path !== undefined) s.put(K.urlPath, req.path);
    if (query >= 0) s.putQuery(K.urlQuery, req.target, query, queryEnd(req.target), rule);
    if (route !== undefined) s.put(K.route, route);
  } else if (connect) {
    const authority = splitHost(req.target);
    s.put(K.serverAddress, authority.address);
    s.put(K.serverPort, authority.port ?? m.remotePort);
  } else {
    s.put(K.urlFull, fullUrl(req.target, req.host, m.remoteAddress, m.remotePort, rule, scheme));
    if (req.path !== undefined) s.put(K.urlPath, req.path);
  }
  const status = x.response.status;
  if (isError(server, status)) s.put(K.errorType, String(status));
}

/** The connection fields putHttpAttributes hands its sink, one object refilled per span (sinks copy what they keep). */
const CONNECTION_FIELDS: ConnectionFields = { server: false, scheme: "", version: undefined, userAgent: undefined, host: undefined, connect: false };

/** Whether an HTTP exchange's status is an error for the side that reports it (4xx only for clients). */
function isError(server: boolean, status: number): boolean {
  return status >= 500 || (!server && status >= 400);
}

export function exchangeToSpan(x: HttpExchange<EndpointMeta>, c: SpanContext): SpanItem {
  if (x.rpc) return rpcSpan(x, c);
  const m = x.meta;
  const server = x.role === "server";
  const who = c.describe(m.pid, m.comm);
  const req = x.request;
  const known = KNOWN_METHODS.has(req.method);
  // HTTP/2 says its scheme (:scheme); otherwise the capture tells: TLS plaintext is https.
  const scheme = x.scheme ?? (m.tls ? TLS_URL_SCHEME : URL_SCHEME);
  // A target cut by the capture whose query had begun has its whole path.
  const route = server && req.path !== undefined && c.route ? c.route(who.resource, req.path, req.truncated === "url" && !/[?#]/.test(req.target)) : undefined;
  const method = known ? req.method : "HTTP";
  const span = new HttpSpan(x, c, who.attributes, c.queryRedaction ?? "all", scheme, route, route !== undefined ? `${method} ${route}` : method, server, isError(server, x.response.status));
  if (c.scope) span.scope = c.scope;
  if (who.resource) span.resource = who.resource;
  return span;
}
