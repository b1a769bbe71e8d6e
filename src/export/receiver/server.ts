/**
 * An OTLP/gRPC receiver for traces, metrics, logs and profiles (@grpc/grpc-js server). It counts what arrives,
 * tells a listener about each request, and answers as a `respond` hook says (success by default; tests use the
 * hook to answer with error codes, RetryInfo or partial success). Used by `svc-agent receive` and by tests.
 */
import * as grpc from "@grpc/grpc-js";
import { SIGNALS, type Signal } from "../config";
import { SERVICES, otlpType } from "../schema";
import { countItems, type RequestCounts } from "./count";

const RETRY_INFO_TYPE_URL = "type.googleapis.com/google.rpc.RetryInfo";
const MAX_RECEIVE_MESSAGE_BYTES = 64 * 1024 * 1024;

/** One Export request as received. */
export interface ReceivedRequest extends RequestCounts {
  signal: Signal;
  /** The request body (after gRPC decompression). */
  body: Buffer;
  /** Request metadata (headers), lower-case keys; binary values base64. */
  metadata: Record<string, string>;
  /** The message encoding the client declared (`gzip` or `identity`). */
  encoding: string;
  peer: string;
  receivedAt: Date;
}

/** How to answer a request: success (optionally partial), or a gRPC error (optionally with RetryInfo). */
export type ReceiverReply =
  | { ok: true; rejected?: number; message?: string }
  | { ok: false; code: grpc.status; message?: string; retryDelayMs?: number };

export interface ReceiverOptions {
  /** host:port to listen on (port 0: any free port). */
  listen: string;
  /** TLS: server certificate and key (PEM); with `clientCa`, client certificates are required. */
  tls?: { cert: Buffer; key: Buffer; clientCa?: Buffer };
  /** Decides the answer to each request (default: success). */
  respond?: (req: ReceivedRequest) => ReceiverReply | Promise<ReceiverReply>;
  /** Called for every request, before answering. */
  onRequest?: (req: ReceivedRequest) => void;
}

const identity = (b: Buffer): Buffer => b;
/** Metadata key under which the receiver passes the request's `grpc-encoding` (grpc-js strips the header) to its handler. */
const ENCODING_KEY = "x-svc-received-grpc-encoding";

/** Copies the encoding the base call parsed from the request headers into the metadata the handler sees. */
const recordEncoding: grpc.ServerInterceptor = (_method, call) => {
  const encoding = (call as unknown as { incomingEncoding?: string }).incomingEncoding ?? "identity";
  return new grpc.ServerInterceptingCall(call, {
    start: (next) =>
      next({
        onReceiveMetadata: (md, mdNext) => {
          md.set(ENCODING_KEY, encoding);
          mdNext(md);
        },
      }),
  });
};

function metadataRecord(md: grpc.Metadata): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(md.getMap())) out[k] = typeof v === "string" ? v : Buffer.from(v).toString("base64");
  return out;
}

/** `grpc-status-details-bin` carrying a google.rpc.Status with one RetryInfo. */
export function retryInfoMetadata(code: number, message: string, delayMs: number): grpc.Metadata {
  const retryInfo = otlpType("google.rpc.RetryInfo");
  const seconds = Math.floor(delayMs / 1000);
  const nanos = Math.round((delayMs - seconds * 1000) * 1e6);
  const value = retryInfo.encode(retryInfo.create({ retryDelay: { seconds, nanos } })).finish();
  const st = otlpType("google.rpc.Status");
  const body = st.encode(st.fromObject({ code, message, details: [{ typeUrl: RETRY_INFO_TYPE_URL, value }] })).finish();
  const md = new grpc.Metadata();
  md.set("grpc-status-details-bin", Buffer.from(body));
  return md;
}

export class OtlpReceiver {
  readonly #server: grpc.Server;
  readonly #options: ReceiverOptions;
  #port = 0;

  constructor(options: ReceiverOptions) {
    this.#options = options;
    this.#server = new grpc.Server({ "grpc.max_receive_message_length": MAX_RECEIVE_MESSAGE_BYTES, interceptors: [recordEncoding] });
    for (const signal of SIGNALS) {
      const svc = SERVICES[signal];
      const definition: grpc.ServiceDefinition = {
        Export: {
          path: svc.path,
          requestStream: false,
          responseStream: false,
          requestSerialize: identity,
          requestDeserialize: identity,
          responseSerialize: identity,
          responseDeserialize: identity,
        },
      };
      const responseType = otlpType(svc.response);
      const handler: grpc.handleUnaryCall<Buffer, Buffer> = (call, callback) => {
        void this.#handle(signal, call, responseType).then(
          (r) => (r.ok ? callback(null, r.body) : callback(r.error)),
          (e: Error) => callback({ code: grpc.status.INTERNAL, details: e.message }),
        );
      };
      this.#server.addService(definition, { Export: handler });
    }
  }

  async #handle(
    signal: Signal,
    call: grpc.ServerUnaryCall<Buffer, Buffer>,
    responseType: ReturnType<typeof otlpType>,
  ): Promise<{ ok: true; body: Buffer } | { ok: false; error: Partial<grpc.StatusObject> }> {
    const body = call.request;
    let counts: RequestCounts;
    try {
      counts = countItems(signal, body);
    } catch (e) {
      return { ok: false, error: { code: grpc.status.INVALID_ARGUMENT, details: `malformed request: ${(e as Error).message}` } };
    }
    const metadata = metadataRecord(call.metadata);
    const encoding = metadata[ENCODING_KEY] ?? "identity";
    delete metadata[ENCODING_KEY];
    const req: ReceivedRequest = {
      signal,
      body,
      metadata,
      encoding,
      peer: call.getPeer(),
      receivedAt: new Date(),
      ...counts,
    };
    this.#options.onRequest?.(req);
    const reply = (await this.#options.respond?.(req)) ?? { ok: true };
    if (!reply.ok) {
      const message = reply.message ?? "rejected by test receiver";
      const md = reply.retryDelayMs !== undefined ? retryInfoMetadata(reply.code, message, reply.retryDelayMs) : undefined;
      return { ok: false, error: { code: reply.code, details: message, ...(md ? { metadata: md } : {}) } };
    }
    if (!reply.rejected && !reply.message) return { ok: true, body: Buffer.alloc(0) };
    const response = responseType.fromObject({
      partialSuccess: { [SERVICES[signal].rejectedField]: reply.rejected ?? 0, errorMessage: reply.message ?? "" },
    });
    return { ok: true, body: Buffer.from(responseType.encode(response).finish()) };
  }

  /** Binds and starts serving; resolves with the bound port. */
  async start(): Promise<number> {
    const creds = this.#options.tls
      ? grpc.ServerCredentials.createSsl(
          this.#options.tls.clientCa ?? null,
          [{ private_key: this.#options.tls.key, cert_chain: this.#options.tls.cert }],
          this.#options.tls.clientCa !== undefined,
        )
      : grpc.ServerCredentials.createInsecure();
    this.#port = await new Promise<number>((resolve, reject) => {
      this.#server.bindAsync(this.#options.listen, creds, (err, port) => (err ? reject(err) : resolve(port)));
    });
    return this.#port;
  }

  get port(): number {
    return this.#port;
  }

  /** Stops accepting and ends open calls. Idempotent. */
  stop(): Promise<void> {
    return new Promise((resolve) => {
      this.#server.tryShutdown(() => resolve());
      setTimeout(() => this.#server.forceShutdown(), 1000).unref();
    });
  }

  /** Stops at once, cutting open connections (tests: "backend goes down"). */
  kill(): void {
    this.#server.forceShutdown();
  }
}

/** Decodes a request body into a plain object (ids as hex, 64-bit integers as strings), for JSON output. */
export function decodeRequest(signal: Signal, body: Uint8Array): Record<string, unknown> {
  const t = otlpType(SERVICES[signal].request);
  const obj = t.toObject(t.decode(body), { longs: String, enums: String, bytes: String, defaults: false, oneofs: false });
  return hexIds(obj) as Record<string, unknown>;
}

const ID_FIELDS = new Set(["traceId", "spanId", "parentSpanId", "profileId"]);

function hexIds(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(hexIds);
  if (node && typeof node === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(node)) out[k] = ID_FIELDS.has(k) && typeof v === "string" ? Buffer.from(v, "base64").toString("hex") : hexIds(v);
    return out;
  }
  return node;
}
