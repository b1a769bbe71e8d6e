/**
 * The OTLP/HTTP transport (binary protobuf) on Bun's fetch: one POST per export to the signal's URL
 * (`/v1/traces`, ... appended to a generic endpoint; a per-signal endpoint as it is), gzip at
 * `otlp.compression_level`, `otlp.headers`, TLS from `otlp.tls`. Every answer becomes an ExportOutcome by the
 * OTLP specification's rules for HTTP: 2xx is success (a partial_success in the body rejects that many items),
 * 429/502/503/504 are retryable (`Retry-After`, seconds or an HTTP date, is the server's delay), any other
 * status is a failure (3xx too: redirects are not followed, since the headers may carry credentials). The outcome's `code` is the gRPC code of the same meaning (so readiness, the
 * `export_errors_total` label and the retry rules read one vocabulary); the message starts `HTTP <status>`.
 */
import { promisify } from "node:util";
import { gzip } from "node:zlib";
// The status codes alone: the package's index would load all of grpc-js (see transport-select.ts).
import { Status as GrpcStatus } from "@grpc/grpc-js/build/src/constants";
import { BUILD_INFO } from "../version";
import type { OtlpConfig, Signal, SignalTarget } from "./config";
import { headerSecrets, withoutSecrets, type ExportOutcome } from "./outcome";
import { connectionRefused, directConnection } from "./refusal-probe";
import { retryAfterMs } from "./retry-after";
import { otlpType } from "./schema";
import { readPem, successOf, type Transport } from "./transport";

const CONTENT_TYPE = "application/x-protobuf";
/** The user agent: the agent's name and version, then the HTTP client's. */
export const HTTP_USER_AGENT = `svc-agent/${BUILD_INFO.version} Bun/${Bun.version}`;
/** Status codes the OTLP specification retries (everything else that is not 2xx is not retried). */
const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504]);
/** Longest text of an error answer kept in the outcome's message. */
const MAX_ERROR_TEXT_CHARS = 200;
/** Largest answer body read (as OTLP/gRPC's max receive message size); the rest is not read. */
const MAX_RESPONSE_BYTES = 4 * 1024 * 1024;

const gzipAsync = promisify(gzip) as (data: Uint8Array, options: { level: number }) => Promise<Buffer>;

/** The gRPC code of the same meaning as an HTTP status (gRPC's HTTP mapping, 4xx refinements for OTLP). */
export function grpcCodeOfHttpStatus(status: number): number {
  switch (status) {
    case 400:
    case 413:
    case 422:
      return GrpcStatus.INVALID_ARGUMENT;
    case 401:
      return GrpcStatus.UNAUTHENTICATED;
    case 403:
      return GrpcStatus.PERMISSION_DENIED;
    case 404:
    case 405:
      return GrpcStatus.UNIMPLEMENTED;
    case 301:
    case 302:
    case 303:
    case 307:
    case 308:
      // Redirects are not followed (the headers carry credentials): the endpoint is wrong, like a 404.
      return GrpcStatus.UNIMPLEMENTED;
    case 429:
      return GrpcStatus.RESOURCE_EXHAUSTED;
    case 502:
    case 503:
    case 504:
      return GrpcStatus.UNAVAILABLE;
    default:
      return status >= 500 ? GrpcStatus.INTERNAL : GrpcStatus.FAILED_PRECONDITION;
  }
}

/** The message of an error answer: a google.rpc.Status body's message, else the start of its text. */
function errorText(body: Uint8Array, contentType: string): string {
  if (body.length === 0) return "";
  if (contentType.includes("protobuf")) {
    try {
      const st = otlpType("google.rpc.Status").decode(body) as unknown as { message?: string };
      if (st.message) return st.message;
    } catch {
      /* not a Status: fall back to the text */
    }
  }
  return new TextDecoder().decode(body.subarray(0, MAX_ERROR_TEXT_CHARS * 4)).slice(0, MAX_ERROR_TEXT_CHARS).trim();
}

/** The ExportOutcome of a non-2xx answer. */
export function errorOutcome(status: number, statusText: string, retryAfter: string | null, body: Uint8Array, contentType: string, location: string | null = null): ExportOutcome {
  const text = location ? `redirected to ${location}; set the endpoint to it (redirects are not followed)` : errorText(body, contentType);
  const message = `HTTP ${status}${statusText ? ` ${statusText}` : ""}${text ? `: ${text}` : ""}`;
  const code = grpcCodeOfHttpStatus(status);
  if (RETRYABLE_STATUSES.has(status)) return { kind: "retryable", code, message, delayMs: retryAfterMs(retryAfter) };
  return { kind: "failure", code, message };
}

/** The ExportOutcome of a request that got no answer (fetch threw). */
function networkOutcome(e: unknown, cancelled: boolean): ExportOutcome {
  const err = e as Error & { code?: string };
  if (cancelled) return { kind: "retryable", code: GrpcStatus.CANCELLED, message: "cancelled", delayMs: undefined };
  if (err?.name === "TimeoutError") return { kind: "retryable", code: GrpcStatus.DEADLINE_EXCEEDED, message: "deadline exceeded", delayMs: undefined };
  const code = err?.code ?? "";
  let message = err?.message ?? String(e);
  if (code === "ConnectionRefused" || code === "ECONNREFUSED") message = "connection refused";
  else if (/CERT|SSL|TLS|SELF_SIGNED|VERIFY/i.test(code)) message = `TLS certificate verify failed: ${code}`;
  else if (code) message = `${code}: ${message}`;
  return { kind: "retryable", code: GrpcStatus.UNAVAILABLE, message, delayMs: undefined };
}

/** The body of `res`, at most `max` bytes (the rest is cancelled unread); `whole` says whether that was all of it. */
export async function readBounded(res: Response, max = MAX_RESPONSE_BYTES): Promise<{ bytes: Uint8Array; whole: boolean }> {
  if (!res.body) return { bytes: new Uint8Array(0), whole: true };
  const declared = Number(res.headers.get("content-length") ?? -1);
  if (declared > max) {
    await res.body.cancel();
    return { bytes: new Uint8Array(0), whole: false };
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  const reader = res.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.length;
    if (total > max) {
      await reader.cancel();
      return { bytes: Buffer.concat(chunks), whole: false };
    }
    chunks.push(value);
  }
  return { bytes: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks), whole: true };
}

/** The PEM text at `path` (undefined when unset), as Bun's fetch takes it. */
function pemText(key: string, path: string): string | undefined {
  return readPem(key, path)?.toString("utf8");
}

export interface HttpTransportOptions {
  /** TLS files and the gzip level. */
  otlp: OtlpConfig;
  /** The resolved settings of each signal this transport sends. */
  targets: Partial<Record<Signal, SignalTarget>>;
}

export class HttpTransport implements Transport {
  readonly #targets: Partial<Record<Signal, SignalTarget & { headerList: Record<string, string>; secrets: string[] }>>;
  readonly #tls: BunFetchRequestInit["tls"];
  readonly #level: number;
  /** Bun's fetch goes to the endpoint itself unless a proxy variable is set. */
  readonly #direct = directConnection();
  #closed = false;
  /** The last request got an HTTP answer (any status): the backend can be reached. */
  #reached = false;

  /** Reads the TLS files (throws TransportConfigError when one cannot be read). Opens nothing. */
  constructor(o: HttpTransportOptions) {
    const tls = o.otlp.tls;
    this.#tls = {
      ca: pemText("otlp.tls.ca_file", tls.ca_file),
      cert: pemText("otlp.tls.cert_file", tls.cert_file),
      key: pemText("otlp.tls.key_file", tls.key_file),
      ...(tls.server_name ? { serverName: tls.server_name } : {}),
      rejectUnauthorized: true,
    };
    this.#level = o.otlp.compression_level;
    this.#targets = {};
    for (const [signal, t] of Object.entries(o.targets) as Array<[Signal, SignalTarget]>) {
      const headerList: Record<string, string> = { "user-agent": HTTP_USER_AGENT };
      for (const [k, v] of Object.entries(t.headers)) headerList[k.toLowerCase()] = v;
      headerList["content-type"] = CONTENT_TYPE;
      if (t.compression === "gzip") headerList["content-encoding"] = "gzip";
      this.#targets[signal] = { ...t, headerList, secrets: headerSecrets(t.headers) };
    }
  }

  async send(signal: Signal, body: Uint8Array, deadline: number, abort?: AbortSignal): Promise<ExportOutcome> {
    return withoutSecrets(await this.#send(signal, body, deadline, abort), this.#targets[signal]?.secrets ?? []);
  }

  async #send(signal: Signal, body: Uint8Array, deadline: number, abort?: AbortSignal): Promise<ExportOutcome> {
    const target = this.#targets[signal];
    if (this.#closed) return { kind: "retryable", code: GrpcStatus.UNAVAILABLE, message: "transport closed", delayMs: undefined };
    if (!target) return { kind: "failure", code: GrpcStatus.UNIMPLEMENTED, message: `no OTLP/HTTP endpoint for ${signal}` };
    const timeout = AbortSignal.timeout(Math.max(1, deadline - Date.now()));
    const signalOf = abort ? AbortSignal.any([abort, timeout]) : timeout;
    try {
      const payload = target.compression === "gzip" ? await gzipAsync(body, { level: this.#level }) : body;
      const res = await fetch(target.url, {
        method: "POST",
        headers: target.headerList,
        body: payload,
        signal: signalOf,
        redirect: "manual",
        ...(target.url.startsWith("https:") ? { tls: this.#tls } : {}),
      });
      const { bytes: answer, whole } = await readBounded(res);
      this.#reached = true;
      if (res.ok) return whole ? successOf(signal, answer) : { kind: "success", rejected: 0, message: `answer over ${MAX_RESPONSE_BYTES} bytes not read` };
      const location = res.status >= 300 && res.status < 400 ? res.headers.get("location") : null;
      return errorOutcome(res.status, res.statusText, res.headers.get("retry-after"), answer, res.headers.get("content-type") ?? "", location);
    } catch (e) {
      this.#reached = false;
      return networkOutcome(e, abort?.aborted === true && !timeout.aborted);
    }
  }

  /** Whether the last request got an answer from the backend (HTTP has no channel whose state could be watched). */
  ready(): boolean {
    return !this.#closed && this.#reached;
  }

  refusedNow(timeoutMs: number): Promise<boolean> {
    const t = this.#targets.traces ?? Object.values(this.#targets)[0];
    if (this.#closed || !this.#direct || !t) return Promise.resolve(false);
    return connectionRefused(t.address, timeoutMs);
  }

  /** Further sends answer "transport closed"; requests in flight end on their own (their deadline or cancel). */
  close(): void {
    this.#closed = true;
  }
}
