/**
 * A fault-injecting OTLP/HTTP backend for tests: Bun.serve on the OTLP paths, bodies decoded with protobufjs
 * from the official .proto files under proto/ (not with the agent's own decoder), answers scripted by a
 * `respond` hook: success (optionally a partial_success), or any HTTP status with an optional Retry-After and a
 * google.rpc.Status body. Its requests have the shape of the gRPC test receiver's (ReceivedRequest), so one test
 * can run against either.
 */
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import protobuf from "protobufjs";
import type { Signal } from "../../../src/export/config";
import type { ReceivedRequest } from "../../../src/export/receiver";

const PROTO_DIR = join(import.meta.dir, "../../../proto");
const PATHS: Record<string, { signal: Signal; request: string; response: string; rejected: string }> = {
  "/v1/traces": { signal: "traces", request: "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest", response: "opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse", rejected: "rejectedSpans" },
  "/v1/metrics": { signal: "metrics", request: "opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest", response: "opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceResponse", rejected: "rejectedDataPoints" },
  "/v1/logs": { signal: "logs", request: "opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest", response: "opentelemetry.proto.collector.logs.v1.ExportLogsServiceResponse", rejected: "rejectedLogRecords" },
  "/v1development/profiles": {
    signal: "profiles",
    request: "opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest",
    response: "opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceResponse",
    rejected: "rejectedProfiles",
  },
};

let root: protobuf.Root | undefined;
/** The official protos, loaded by protobufjs from their files (imports resolved from proto/). */
export function officialRoot(): protobuf.Root {
  if (root) return root;
  const r = new protobuf.Root();
  r.resolvePath = (_origin, target) => (target.startsWith("/") ? target : join(PROTO_DIR, target));
  r.loadSync(
    [
      "opentelemetry/proto/collector/trace/v1/trace_service.proto",
      "opentelemetry/proto/collector/metrics/v1/metrics_service.proto",
      "opentelemetry/proto/collector/logs/v1/logs_service.proto",
      "opentelemetry/proto/collector/profiles/v1development/profiles_service.proto",
      "google/rpc/status.proto",
    ],
    { keepCase: false },
  );
  r.resolveAll();
  root = r;
  return r;
}

type Decoded = Record<string, Array<Record<string, unknown[] | undefined>> | undefined>;

/** Items of a decoded request: spans, data points, log records or profiles. */
function countDecoded(signal: Signal, m: Decoded): { resources: number; scopes: number; items: number } {
  const level = { traces: ["resourceSpans", "scopeSpans", "spans"], metrics: ["resourceMetrics", "scopeMetrics", "metrics"], logs: ["resourceLogs", "scopeLogs", "logRecords"], profiles: ["resourceProfiles", "scopeProfiles", "profiles"] }[signal];
  const resources = (m[level[0]!] ?? []) as Array<Record<string, unknown>>;
  let scopes = 0;
  let items = 0;
  for (const r of resources) {
    const ss = (r[level[1]!] ?? []) as Array<Record<string, unknown>>;
    scopes += ss.length;
    for (const s of ss) {
      const list = (s[level[2]!] ?? []) as Array<Record<string, { dataPoints?: unknown[] } | undefined>>;
      if (signal !== "metrics") items += list.length;
      else for (const metric of list) for (const k of ["gauge", "sum", "histogram", "exponentialHistogram", "summary"]) items += metric[k]?.dataPoints?.length ?? 0;
    }
  }
  return { resources: resources.length, scopes, items };
}

/** How to answer: success (optionally partial), or an HTTP error status (optionally with Retry-After). */
export type HttpReply = { ok: true; rejected?: number; message?: string } | { ok: false; status: number; message?: string; retryAfter?: string };

export interface HttpBackendOptions {
  /** host:port to listen on (port 0: any free port). */
  listen: string;
  /** TLS: server certificate and key (PEM); with `clientCa`, client certificates signed by it are required. */
  tls?: { cert: Buffer | string; key: Buffer | string; clientCa?: Buffer | string };
  respond?: (req: ReceivedRequest) => HttpReply | Promise<HttpReply>;
  onRequest?: (req: ReceivedRequest) => void;
}

export class OtlpHttpBackend {
  readonly #options: HttpBackendOptions;
  #server: ReturnType<typeof Bun.serve> | undefined;
  #port = 0;
  /** Requests that were not OTLP (wrong path, method or content type), answered 404/405/415. */
  readonly refused: Array<{ method: string; path: string; contentType: string }> = [];

  constructor(options: HttpBackendOptions) {
    this.#options = options;
  }

  get port(): number {
    return this.#port;
  }

  async start(): Promise<number> {
    const i = this.#options.listen.lastIndexOf(":");
    this.#server = Bun.serve({
      hostname: this.#options.listen.slice(0, i),
      port: Number(this.#options.listen.slice(i + 1)),
      ...(this.#options.tls ? { tls: this.#tls(this.#options.tls) } : {}),
      fetch: (req, server) => this.#handle(req, server.requestIP(req)?.address ?? ""),
    });
    this.#port = this.#server.port ?? 0;
    return this.#port;
  }

  #tls(t: NonNullable<HttpBackendOptions["tls"]>) {
    return { cert: t.cert, key: t.key, ...(t.clientCa ? { ca: t.clientCa, requestCert: true, rejectUnauthorized: true } : {}) };
  }

  async #handle(req: Request, peer: string): Promise<Response> {
    const path = new URL(req.url).pathname;
    const route = PATHS[path];
    const contentType = req.headers.get("content-type") ?? "";
    if (!route || req.method !== "POST" || contentType !== "application/x-protobuf") {
      this.refused.push({ method: req.method, path, contentType });
      return new Response("not an OTLP/HTTP protobuf request", { status: !route ? 404 : req.method !== "POST" ? 405 : 415 });
    }
    const encoding = req.headers.get("content-encoding") ?? "identity";
    let body = Buffer.from(await req.arrayBuffer());
    if (encoding === "gzip") body = gunzipSync(body);
    const r = officialRoot();
    let decoded: Decoded;
    try {
      decoded = r.lookupType(route.request).toObject(r.lookupType(route.request).decode(body), { arrays: false }) as Decoded;
    } catch (e) {
      return this.#status(400, `malformed request: ${(e as Error).message}`);
    }
    const metadata: Record<string, string> = {};
    req.headers.forEach((v, k) => (metadata[k] = v));
    const received: ReceivedRequest = { signal: route.signal, body, metadata, encoding, peer, receivedAt: new Date(), ...countDecoded(route.signal, decoded) };
    this.#options.onRequest?.(received);
    const reply = (await this.#options.respond?.(received)) ?? { ok: true };
    if (!reply.ok) {
      const res = this.#status(reply.status, reply.message ?? "rejected by test backend");
      if (reply.retryAfter !== undefined) res.headers.set("retry-after", reply.retryAfter);
      return res;
    }
    const t = r.lookupType(route.response);
    const message = reply.rejected || reply.message ? { partialSuccess: { [route.rejected]: reply.rejected ?? 0, errorMessage: reply.message ?? "" } } : {};
    return new Response(t.encode(t.fromObject(message)).finish(), { headers: { "content-type": "application/x-protobuf" } });
  }

  #status(status: number, message: string): Response {
    const t = officialRoot().lookupType("google.rpc.Status");
    return new Response(t.encode(t.fromObject({ code: 0, message })).finish(), { status, headers: { "content-type": "application/x-protobuf" } });
  }

  /** Stops accepting; lets requests in flight finish for up to a second, then cuts them. Idempotent. */
  async stop(): Promise<void> {
    const s = this.#server;
    this.#server = undefined;
    if (!s) return;
    await Promise.race([s.stop(false), Bun.sleep(1000)]);
    await s.stop(true);
  }

  /** Stops at once, cutting open connections ("the backend goes down"). */
  kill(): void {
    const s = this.#server;
    this.#server = undefined;
    void s?.stop(true);
  }
}
