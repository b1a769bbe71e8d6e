/**
 * HTTP exchanges to OTLP spans: SERVER spans for processes that read the request, CLIENT spans for
 * processes that wrote it, with the HTTP semantic-convention attributes (method, path without query,
 * status, server address and port, peer) and the process/container attributes of the traced process.
 */
import type { Attributes } from "../../export/types";
import { SpanKind, StatusCode, type Scope, type SpanItem } from "../../export/model";
import type { HttpExchange } from "./exchanges";

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
}

const ID_POOL_BYTES = 24 * 1024;
let idPool = new Uint8Array(0);
let idPoolAt = 0;

/** `n` random bytes from a pool refilled with crypto.getRandomValues (one call per ~1000 spans). */
export function randomId(n: number): Uint8Array {
  if (idPoolAt + n > idPool.length) {
    idPool = crypto.getRandomValues(new Uint8Array(ID_POOL_BYTES));
    idPoolAt = 0;
  }
  const id = idPool.subarray(idPoolAt, idPoolAt + n);
  idPoolAt += n;
  return id;
}

/** Host and port of a Host header ("h", "h:8080", "[::1]:8080"). */
export function splitHost(host: string): { address: string; port: number | undefined } {
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(host) ?? /^([^:]+)(?::(\d+))?$/.exec(host);
  if (!m) return { address: host, port: undefined };
  return { address: m[1]!, port: m[2] ? Number(m[2]) : undefined };
}

export function exchangeToSpan(x: HttpExchange<EndpointMeta>, c: SpanContext): SpanItem {
  const m = x.meta;
  const server = x.role === "server";
  const who = c.describe(m.pid, m.comm);
  const host = x.request.host ? splitHost(x.request.host) : undefined;
  const attributes: Attributes = {
    ...who.attributes,
    "http.request.method": x.request.method,
    "http.response.status_code": x.response.status,
    "network.protocol.name": "http",
    "network.protocol.version": x.request.version,
    "network.transport": "tcp",
    "network.peer.address": m.remoteAddress,
    "network.peer.port": m.remotePort,
    "url.scheme": m.tls ? "https" : "http",
  };
  if (x.request.path !== undefined) attributes["url.path"] = x.request.path;
  if (server) {
    attributes["server.address"] = host?.address ?? m.localAddress;
    attributes["server.port"] = m.localPort;
    attributes["client.address"] = m.remoteAddress;
    attributes["client.port"] = m.remotePort;
    attributes["network.local.address"] = m.localAddress;
    attributes["network.local.port"] = m.localPort;
  } else {
    attributes["server.address"] = host?.address ?? m.remoteAddress;
    attributes["server.port"] = m.remotePort;
  }
  const status = x.response.status;
  const error = status >= 500 || (!server && status >= 400);
  if (error) attributes["error.type"] = String(status);
  const span: SpanItem = {
    traceId: randomId(16),
    spanId: randomId(8),
    name: x.request.method,
    kind: server ? SpanKind.SERVER : SpanKind.CLIENT,
    startTimeUnixNano: c.toEpochNs(x.startNs),
    endTimeUnixNano: c.toEpochNs(x.endNs > x.startNs ? x.endNs : x.startNs),
    attributes,
    status: { code: error ? StatusCode.ERROR : StatusCode.UNSET },
  };
  if (c.scope) span.scope = c.scope;
  if (who.resource) span.resource = who.resource;
  return span;
}
