/**
 * Schema of `otlp`, `queues` and `backoff`: the OTLP export pipeline (gRPC or HTTP/protobuf). Owned by the
 * exporter, with what the transports need of it resolved per signal (`signalTarget`).
 */
import { mkdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { Type, type Static } from "@sinclair/typebox";
import type { ConfigProblem } from "../config/problems";
import { Duration, Size, UNIT_HINT, msOf, bytesOf } from "../config/units";

export const SIGNALS = ["traces", "metrics", "logs", "profiles"] as const;
export type Signal = (typeof SIGNALS)[number];

export const PROTOCOLS = ["grpc", "http/protobuf"] as const;
export type Protocol = (typeof PROTOCOLS)[number];

/** Where each protocol's receiver listens by default (OTLP specification: 4317 for gRPC, 4318 for HTTP). */
export const DEFAULT_ENDPOINTS: Record<Protocol, string> = { grpc: "127.0.0.1:4317", "http/protobuf": "http://127.0.0.1:4318" };

/** The OTLP/HTTP path of each signal, appended to a generic endpoint (never to a per-signal one). */
export const HTTP_PATHS: Record<Signal, string> = {
  traces: "/v1/traces",
  metrics: "/v1/metrics",
  logs: "/v1/logs",
  profiles: "/v1development/profiles",
};

const ProtocolSchema = (description: string, withDefault: boolean) =>
  Type.Union([Type.Literal("grpc"), Type.Literal("http/protobuf")], withDefault ? { default: "grpc", description } : { description });

const signalOverrides = (signal: Signal) => {
  const env = `OTEL_EXPORTER_OTLP_${signal.toUpperCase()}`;
  return Type.Object(
    {
      protocol: Type.Optional(ProtocolSchema(`Protocol of ${signal} (otlp.protocol when absent). Env: ${env}_PROTOCOL.`, false)),
      endpoint: Type.Optional(
        Type.String({
          minLength: 1,
          description: `Endpoint of ${signal}, used as it is (http/protobuf: the whole URL, path included); otlp.endpoint when absent. Env: ${env}_ENDPOINT.`,
        }),
      ),
      headers: Type.Optional(
        Type.Record(Type.String(), Type.String(), { description: `Headers of ${signal} in place of otlp.headers; values are redacted. Env: ${env}_HEADERS.` }),
      ),
      compression: Type.Optional(
        Type.Union([Type.Literal("gzip"), Type.Literal("none")], { description: `Compression of ${signal} (otlp.compression when absent). Env: ${env}_COMPRESSION.` }),
      ),
      timeout: Type.Optional(
        Type.String({
          format: "duration",
          [UNIT_HINT]: "duration",
          description: `Deadline of one ${signal} export request (otlp.timeout when absent). Env: ${env}_TIMEOUT (milliseconds).`,
        }),
      ),
    },
    { additionalProperties: false, default: {} },
  );
};

export const OtlpSchema = Type.Object(
  {
    protocol: ProtocolSchema("Transport: grpc (OTLP/gRPC) or http/protobuf (OTLP/HTTP, binary protobuf). Env: OTEL_EXPORTER_OTLP_PROTOCOL.", true),
    endpoint: Type.String({
      default: DEFAULT_ENDPOINTS.grpc,
      minLength: 1,
      description:
        "Backend: host:port, or a URL http://host:port or https://host:port (its scheme then decides TLS in place of insecure). http/protobuf appends /v1/traces, /v1/metrics, /v1/logs or /v1development/profiles to the URL's path; its default is http://127.0.0.1:4318. Env: OTEL_EXPORTER_OTLP_ENDPOINT.",
    }),
    insecure: Type.Boolean({ default: true, description: "Plaintext for a host:port endpoint; false uses TLS. Env: OTEL_EXPORTER_OTLP_INSECURE." }),
    compression: Type.Union([Type.Literal("gzip"), Type.Literal("none")], { default: "gzip", description: "gzip or none. Env: OTEL_EXPORTER_OTLP_COMPRESSION." }),
    compression_level: Type.Integer({
      minimum: 1,
      maximum: 9,
      default: 1,
      description: "gzip level, 1 (fastest) to 9 (smallest); 1 costs about a quarter of the CPU time of zlib's default 6 for about 11% more bytes.",
    }),
    headers: Type.Record(Type.String(), Type.String(), {
      default: {},
      description: "gRPC metadata or HTTP headers sent with every export (for example an API key); values are redacted in /config. Env: OTEL_EXPORTER_OTLP_HEADERS (key=value,... merged over these).",
    }),
    timeout: Duration("10s", "Deadline of one export request. Env: OTEL_EXPORTER_OTLP_TIMEOUT (milliseconds)."),
    tls: Type.Object(
      {
        ca_file: Type.String({ default: "", description: "PEM file of the CA that signs the backend's certificate (system roots when empty). Env: OTEL_EXPORTER_OTLP_CERTIFICATE." }),
        cert_file: Type.String({ default: "", description: "PEM client certificate for mutual TLS. Env: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE." }),
        key_file: Type.String({ default: "", description: "PEM client key for mutual TLS. Env: OTEL_EXPORTER_OTLP_CLIENT_KEY." }),
        server_name: Type.String({ default: "", description: "Name to verify in the backend's certificate (defaults to the endpoint host)." }),
      },
      { additionalProperties: false, default: {} },
    ),
    signals: Type.Object(
      { traces: signalOverrides("traces"), metrics: signalOverrides("metrics"), logs: signalOverrides("logs"), profiles: signalOverrides("profiles") },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false, default: {} },
);
export type OtlpConfig = Static<typeof OtlpSchema>;

const queue = (capacity: number, batch: number) =>
  Type.Object(
    {
      capacity: Type.Integer({ minimum: 1, default: capacity, description: "Maximum items queued." }),
      mem_limit: Size("64MiB", "Maximum bytes of encoded items queued."),
      batch_size: Type.Integer({ minimum: 1, default: batch, description: "Items per export request." }),
      batch_timeout: Duration("200ms", "Longest wait before a partial batch is sent."),
      max_in_flight: Type.Integer({
        minimum: 1,
        maximum: 64,
        default: 4,
        description: "Export requests of this signal outstanding at once: more hide a longer round trip to the backend (batches may then be acknowledged out of order).",
      }),
      persistent: Type.Boolean({
        default: false,
        description: "Keep the queue in an append-only log under storage.directory too: accepted items survive a crash and a restart (read at start).",
      }),
    },
    { additionalProperties: false, default: {} },
  );

export const QueuesSchema = Type.Object(
  {
    traces: queue(20_000, 512),
    metrics: queue(20_000, 512),
    logs: queue(20_000, 512),
    profiles: queue(1_000, 16),
  },
  { additionalProperties: false, default: {} },
);
export type QueuesConfig = Static<typeof QueuesSchema>;

export const BackoffSchema = Type.Object(
  {
    initial: Duration("1s", "First retry delay."),
    max: Duration("30s", "Largest retry delay."),
  },
  { additionalProperties: false, default: {} },
);
export type BackoffConfig = Static<typeof BackoffSchema>;

export const StorageSchema = Type.Object(
  {
    directory: Type.String({
      default: "/var/lib/svc-agent",
      minLength: 1,
      description: "Directory of the persistent queues (queues.<signal>.persistent); must be writable when one is on.",
    }),
    fsync_interval: Duration("1s", "How often persistent queue files are synced to disk (0s: after every item). Writes reach the page cache at once (they survive a crash of the agent)."),
  },
  { additionalProperties: false, default: {} },
);
export type StorageConfig = Static<typeof StorageSchema>;

/** Where the persistent queue of `signal` keeps its files. */
export function queueDirectory(storage: StorageConfig, signal: Signal): string {
  return `${storage.directory.replace(/\/+$/, "")}/queue/${signal}`;
}

/** Cross-field rules of `storage`: a persistent queue needs a directory the agent can create and write. */
export function validateStorage(storage: StorageConfig, queues: QueuesConfig): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const persistent = SIGNALS.filter((s) => queues[s].persistent);
  if (persistent.length === 0) return problems;
  try {
    mkdirSync(storage.directory, { recursive: true, mode: 0o700 });
    if (!statSync(storage.directory).isDirectory()) throw new Error("not a directory");
    // A real write (root passes access(2) checks even on a read-only mount).
    const probe = `${storage.directory.replace(/\/+$/, "")}/.svc-agent-write-probe-${process.pid}`;
    writeFileSync(probe, "");
    rmSync(probe, { force: true });
  } catch (e) {
    problems.push({
      path: "storage.directory",
      message: `must be a writable directory when queues.${persistent[0]}.persistent is true: ${(e as Error).message}`,
    });
  }
  return problems;
}


/** What a transport needs to send one signal: the per-signal settings over the generic ones, resolved. */
export interface SignalTarget {
  protocol: Protocol;
  /** gRPC: `host:port`. */
  address: string;
  /** http/protobuf: the URL requests are posted to (path included). */
  url: string;
  /** Plaintext (no TLS). */
  insecure: boolean;
  headers: Record<string, string>;
  compression: "gzip" | "none";
  timeoutMs: number;
}

const HOST_PORT_RE = /^(\[[0-9a-fA-F:.]+\]|[^:\s/]+):\d{1,5}$/;

/** A parsed URL when `endpoint` is written as one (`http://` or `https://`), else undefined. */
function endpointUrl(endpoint: string): URL | undefined {
  if (!/^https?:\/\//i.test(endpoint)) return undefined;
  try {
    return new URL(endpoint);
  } catch {
    return undefined;
  }
}

/** Problem text of an endpoint that is neither host:port nor an http(s) URL (undefined: fine). */
function endpointProblem(endpoint: string, protocol: Protocol, perSignal: boolean): string | undefined {
  if (HOST_PORT_RE.test(endpoint)) return undefined;
  const url = endpointUrl(endpoint);
  if (!url) return `expected host:port or an http:// or https:// URL, got ${JSON.stringify(endpoint)}`;
  if (url.username || url.password) return "must not carry credentials in the URL; send them with headers";
  if (protocol === "grpc" && url.pathname !== "/" && url.pathname !== "") return `a gRPC endpoint has no path, got ${JSON.stringify(url.pathname)}`;
  if (protocol === "grpc" && perSignal && url.search) return "a gRPC endpoint has no query";
  return undefined;
}

/** Whether `endpoint` is plaintext: its URL scheme when written as a URL, else `insecure`. */
function plaintext(endpoint: string, insecure: boolean): boolean {
  const url = endpointUrl(endpoint);
  return url ? url.protocol === "http:" : insecure;
}

/** host:port of an endpoint (a URL's host and port, its scheme's default port when it has none). */
function hostPort(endpoint: string): string {
  const url = endpointUrl(endpoint);
  if (!url) return endpoint;
  return `${url.hostname}:${url.port || (url.protocol === "https:" ? "443" : "80")}`;
}

/** The URL of `signal` for http/protobuf: a per-signal endpoint as it is, the generic one with the signal's path appended. */
function httpUrl(endpoint: string, insecure: boolean, signal: Signal, perSignal: boolean): string {
  const url = endpointUrl(endpoint) ?? new URL(`${insecure ? "http" : "https"}://${endpoint}`);
  if (perSignal) return url.href;
  url.pathname = url.pathname.replace(/\/+$/, "") + HTTP_PATHS[signal];
  return url.href;
}

/** The resolved settings of `signal`: `otlp.signals.<signal>` over the generic `otlp` keys. */
export function signalTarget(otlp: OtlpConfig, signal: Signal): SignalTarget {
  const o = otlp.signals[signal];
  const protocol = o.protocol ?? otlp.protocol;
  const perSignal = o.endpoint !== undefined;
  const endpoint = o.endpoint ?? otlp.endpoint;
  const insecure = plaintext(endpoint, otlp.insecure);
  return {
    protocol,
    address: hostPort(endpoint),
    url: protocol === "http/protobuf" ? httpUrl(endpoint, insecure, signal, perSignal) : "",
    insecure,
    headers: o.headers ?? otlp.headers,
    compression: o.compression ?? otlp.compression,
    timeoutMs: o.timeout !== undefined ? msOf(o, "timeout") : msOf(otlp, "timeout"),
  };
}

/**
 * Fills in the endpoint defaults that depend on the protocol, on the document before schema defaults: no
 * otlp.endpoint with http/protobuf is http://127.0.0.1:4318; a signal whose own protocol differs from
 * otlp.protocol and that has no endpoint anywhere gets its protocol's default. Leaves anything malformed to
 * validation.
 */
export function applyEndpointDefaults(doc: Record<string, unknown>): void {
  const otlp = doc.otlp;
  if (otlp === undefined || otlp === null || typeof otlp !== "object" || Array.isArray(otlp)) return;
  const o = otlp as Record<string, unknown>;
  if (o.endpoint !== undefined) return;
  const generic = (PROTOCOLS as readonly unknown[]).includes(o.protocol) ? (o.protocol as Protocol) : "grpc";
  if (generic !== "grpc") o.endpoint = DEFAULT_ENDPOINTS[generic];
  const signals = o.signals;
  if (!signals || typeof signals !== "object" || Array.isArray(signals)) return;
  for (const s of SIGNALS) {
    const so = (signals as Record<string, unknown>)[s];
    if (!so || typeof so !== "object" || Array.isArray(so)) continue;
    const sig = so as Record<string, unknown>;
    if (sig.endpoint !== undefined || sig.protocol === undefined || sig.protocol === generic) continue;
    if (sig.protocol === "http/protobuf") sig.endpoint = `${DEFAULT_ENDPOINTS["http/protobuf"]}${HTTP_PATHS[s]}`;
    else if (sig.protocol === "grpc") sig.endpoint = DEFAULT_ENDPOINTS.grpc;
  }
}

/**
 * What both transports can send: a name grpc-js takes as metadata (letters, digits, `-`, `_`, `.`; not a
 * binary `-bin` key, which needs bytes) and which is an HTTP token; a value of visible ASCII and spaces (no
 * CR/LF/NUL: fetch refuses such a header and grpc-js throws, printing the value). The value is never shown.
 */
function headerProblems(path: string, headers: Record<string, string> | undefined): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (!/^[0-9A-Za-z_.-]+$/.test(name))
      problems.push({ path: `${path}.${name}`, message: "is not a valid header name (letters, digits, '-', '_' and '.' only)" });
    else if (/-bin$/i.test(name)) problems.push({ path: `${path}.${name}`, message: "binary metadata (a name ending in -bin) is not supported" });
    if (!/^[ -~]*$/.test(value))
      problems.push({ path: `${path}.${name}`, message: "has a character a header value cannot carry (visible ASCII and spaces only; value not shown: secret key)" });
  }
  return problems;
}

/** Cross-field rules of the export sections. */
export function validateExport(otlp: OtlpConfig, queues: QueuesConfig, backoff: BackoffConfig): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const endpointIssue = endpointProblem(otlp.endpoint, otlp.protocol, false);
  problems.push(...headerProblems("otlp.headers", otlp.headers));
  for (const s of SIGNALS) problems.push(...headerProblems(`otlp.signals.${s}.headers`, otlp.signals[s].headers));
  if (endpointIssue) problems.push({ path: "otlp.endpoint", message: endpointIssue });
  for (const s of SIGNALS) {
    const o = otlp.signals[s];
    const issue = o.endpoint === undefined ? undefined : endpointProblem(o.endpoint, o.protocol ?? otlp.protocol, true);
    if (issue) problems.push({ path: `otlp.signals.${s}.endpoint`, message: issue });
    if (o.timeout !== undefined && msOf(o, "timeout") <= 0) problems.push({ path: `otlp.signals.${s}.timeout`, message: "must be greater than 0" });
  }
  if (msOf(otlp, "timeout") <= 0) problems.push({ path: "otlp.timeout", message: "must be greater than 0" });
  if ((otlp.tls.cert_file === "") !== (otlp.tls.key_file === ""))
    problems.push({ path: "otlp.tls.key_file", message: "cert_file and key_file must be given together" });
  const tlsGiven = otlp.tls.ca_file || otlp.tls.cert_file || otlp.tls.server_name;
  if (tlsGiven && !endpointProblem(otlp.endpoint, otlp.protocol, false) && plaintext(otlp.endpoint, otlp.insecure))
    problems.push(
      endpointUrl(otlp.endpoint)
        ? { path: "otlp.endpoint", message: "is an http:// URL but otlp.tls settings are given; write https:// to use TLS" }
        : { path: "otlp.insecure", message: "is true but otlp.tls settings are given; set insecure: false to use TLS" },
    );
  for (const s of SIGNALS) {
    const q = queues[s];
    if (q.batch_size > q.capacity)
      problems.push({ path: `queues.${s}.batch_size`, message: `(${q.batch_size}) must not exceed queues.${s}.capacity (${q.capacity})` });
    if (bytesOf(q, "mem_limit") <= 0) problems.push({ path: `queues.${s}.mem_limit`, message: "must be greater than 0" });
  }
  if (msOf(backoff, "initial") <= 0) problems.push({ path: "backoff.initial", message: "must be greater than 0" });
  if (msOf(backoff, "initial") > msOf(backoff, "max"))
    problems.push({ path: "backoff.max", message: `(${backoff.max}) must not be less than backoff.initial (${backoff.initial})` });
  return problems;
}
