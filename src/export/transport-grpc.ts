/**
 * The last link of the sender chain for otlp.protocol grpc: one OTLP/gRPC unary Export call with @grpc/grpc-js. It sends bytes that
 * are already encoded, gzip-compressed or not, over plaintext or TLS, with `otlp.headers` as metadata, and
 * turns every answer into an ExportOutcome (it does not throw for expected outcomes).
 */
import { isIP } from "node:net";
import { checkServerIdentity } from "node:tls";
import * as grpc from "@grpc/grpc-js";
import { signalTarget, type OtlpConfig, type Signal, type SignalTarget } from "./config";
import { BUILD_INFO } from "../version";
import { installGzipLevel } from "./gzip-filter";
import { connectionRefused, directConnection, endpointAddress } from "./refusal-probe";
import { RETRYABLE_CODES, headerSecrets, withoutSecrets, type ExportOutcome } from "./outcome";
import { SERVICES, otlpType } from "./schema";
import { TransportConfigError, readPem, successOf, type Transport } from "./transport";

const RETRY_INFO_TYPE_URL = "type.googleapis.com/google.rpc.RetryInfo";
const STATUS_DETAILS_KEY = "grpc-status-details-bin";
const COMPRESSION_GZIP = 2;
const COMPRESSION_NONE = 0;
const MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024;
/**
 * TLS server name sent (SNI) when the endpoint is an IP address and no otlp.tls.server_name is set: Bun's
 * tls.connect refuses an IP as servername, which grpc-js always passes; the certificate is still checked
 * against the IP itself.
 */
const IP_ENDPOINT_SNI = "otlp-endpoint.invalid";

export interface TransportOptions {
  /** TLS files and the gzip level. */
  otlp: OtlpConfig;
  /** Address, plaintext or TLS, headers and compression of the channel (default: those of traces in `otlp`). */
  target?: SignalTarget;
  /** Reconnect backoff of the channel (the configured backoff range). */
  reconnectInitialMs: number;
  reconnectMaxMs: number;
}

const serialize = (b: Uint8Array): Buffer => Buffer.from(b.buffer, b.byteOffset, b.byteLength);
const deserialize = (b: Buffer): Buffer => b;

export class GrpcTransport implements Transport {
  readonly #client: grpc.Client;
  readonly #headers: Record<string, string>;
  /** The header values scrubbed from answers' messages. */
  readonly #secrets: string[];
  readonly #endpoint: string;
  /** grpc-js connects to the endpoint itself (no proxy), so a refusal there is the channel's refusal. */
  readonly #direct = directConnection();
  /** The gzip level in force (undefined: no compression, or grpc-js's own gzip at zlib's default level). */
  readonly compressionLevel: number | undefined;
  #inFlight = 0;
  #closing = false;
  #closed = false;

  /** Builds the channel; throws TransportConfigError when TLS files cannot be read. Connects lazily. */
  constructor(o: TransportOptions) {
    const otlp = o.otlp;
    const target = o.target ?? signalTarget(otlp, "traces");
    let creds: grpc.ChannelCredentials;
    const host = endpointAddress(target.address)?.host ?? "";
    const ipHost = !target.insecure && !otlp.tls.server_name && isIP(host) !== 0;
    if (target.insecure) creds = grpc.credentials.createInsecure();
    else {
      const ca = readPem("otlp.tls.ca_file", otlp.tls.ca_file);
      const key = readPem("otlp.tls.key_file", otlp.tls.key_file);
      const cert = readPem("otlp.tls.cert_file", otlp.tls.cert_file);
      try {
        creds = grpc.credentials.createSsl(ca, key, cert, ipHost ? { checkServerIdentity: (_name, c) => checkServerIdentity(host, c) } : {});
      } catch (e) {
        throw new TransportConfigError("otlp.tls", (e as Error).message);
      }
    }
    const options: grpc.ClientOptions = {
      "grpc.default_compression_algorithm": target.compression === "gzip" ? COMPRESSION_GZIP : COMPRESSION_NONE,
      "grpc.initial_reconnect_backoff_ms": Math.max(1, Math.round(o.reconnectInitialMs)),
      "grpc.max_reconnect_backoff_ms": Math.max(1, Math.round(o.reconnectMaxMs)),
      "grpc.max_receive_message_length": MAX_RECEIVE_MESSAGE_BYTES,
      "grpc.primary_user_agent": `svc-agent/${BUILD_INFO.version}`,
    };
    if (!target.insecure && otlp.tls.server_name) {
      options["grpc.ssl_target_name_override"] = otlp.tls.server_name;
      options["grpc.default_authority"] = otlp.tls.server_name;
    } else if (ipHost) {
      options["grpc.ssl_target_name_override"] = IP_ENDPOINT_SNI;
    }
    this.#client = new grpc.Client(target.address, creds, options);
    this.compressionLevel = target.compression === "gzip" && installGzipLevel(this.#client.getChannel(), otlp.compression_level, MAX_RECEIVE_MESSAGE_BYTES) ? otlp.compression_level : undefined;
    this.#headers = { ...target.headers };
    this.#secrets = headerSecrets(target.headers);
    this.#endpoint = target.address;
  }

  refusedNow(timeoutMs: number): Promise<boolean> {
    if (this.#closed || !this.#direct) return Promise.resolve(false);
    return connectionRefused(this.#endpoint, timeoutMs);
  }

  send(signal: Signal, body: Uint8Array, deadline: number, abort?: AbortSignal): Promise<ExportOutcome> {
    if (this.#closed) return Promise.resolve({ kind: "retryable", code: grpc.status.UNAVAILABLE, message: "transport closed", delayMs: undefined });
    const service = SERVICES[signal];
    const metadata = new grpc.Metadata();
    for (const [k, v] of Object.entries(this.#headers)) metadata.set(k.toLowerCase(), v);
    this.#inFlight++;
    return new Promise<ExportOutcome>((resolve) => {
      const call = this.#client.makeUnaryRequest<Uint8Array, Buffer>(
        service.path,
        serialize,
        deserialize,
        body,
        metadata,
        { deadline },
        (err, response) => {
          abort?.removeEventListener("abort", onAbort);
          this.#inFlight--;
          if (this.#closing && this.#inFlight === 0) this.#finishClose();
          resolve(withoutSecrets(err ? fromError(err) : successOf(signal, response), this.#secrets));
        },
      );
      const onAbort = () => call.cancel();
      if (abort?.aborted) call.cancel();
      else abort?.addEventListener("abort", onAbort, { once: true });
    });
  }

  ready(): boolean {
    if (this.#closed) return false;
    return this.#client.getChannel().getConnectivityState(false) === grpc.connectivityState.READY;
  }

  close(): void {
    if (this.#closing) return;
    this.#closing = true;
    if (this.#inFlight === 0) this.#finishClose();
  }

  #finishClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#client.close();
  }
}

function fromError(err: grpc.ServiceError): ExportOutcome {
  const code = err.code ?? grpc.status.UNKNOWN;
  const message = err.details || err.message;
  if (RETRYABLE_CODES.has(code)) return { kind: "retryable", code, message, delayMs: retryDelayMs(err.metadata) };
  if (code === grpc.status.RESOURCE_EXHAUSTED) {
    const delayMs = retryDelayMs(err.metadata);
    if (delayMs !== undefined) return { kind: "retryable", code, message, delayMs };
  }
  return { kind: "failure", code, message };
}

/** The RetryInfo delay carried in `grpc-status-details-bin`, if any. */
export function retryDelayMs(metadata: grpc.Metadata | undefined): number | undefined {
  const raw = metadata?.get(STATUS_DETAILS_KEY)[0];
  if (!raw || typeof raw === "string") return undefined;
  try {
    const st = otlpType("google.rpc.Status").decode(raw) as unknown as { details?: Array<{ typeUrl: string; value: Uint8Array }> };
    for (const d of st.details ?? []) {
      if (d.typeUrl !== RETRY_INFO_TYPE_URL) continue;
      const info = otlpType("google.rpc.RetryInfo").decode(d.value) as unknown as {
        retryDelay?: { seconds?: number | { toNumber(): number }; nanos?: number };
      };
      if (!info.retryDelay) return undefined;
      const s = info.retryDelay.seconds;
      const seconds = typeof s === "number" ? s : s ? s.toNumber() : 0;
      return seconds * 1000 + (info.retryDelay.nanos ?? 0) / 1e6;
    }
  } catch {
    return undefined;
  }
  return undefined;
}
