/**
 * What every OTLP transport is (`Transport`: one encoded request in, an ExportOutcome out) and what the gRPC and HTTP
 * transports share: the error for settings that cannot be applied, reading the TLS files, and reading an Export
 * answer. The transports themselves are transport-grpc.ts (@grpc/grpc-js, loaded when a signal uses it) and
 * transport-http.ts; transport-select.ts picks them.
 */
import { readFileSync } from "node:fs";
import type { Signal } from "./config";
import type { ExportOutcome } from "./outcome";
import { SERVICES, otlpType } from "./schema";

/** The transport could not be built from the configuration (e.g. a TLS file cannot be read). */
export class TransportConfigError extends Error {
  constructor(
    readonly key: string,
    message: string,
  ) {
    super(`${key}: ${message}`);
    this.name = "TransportConfigError";
  }
}

/** Sends one encoded request; `deadline` is absolute (ms since epoch); `abort` cancels the call. */
export interface Transport {
  send(signal: Signal, body: Uint8Array, deadline: number, abort?: AbortSignal): Promise<ExportOutcome>;
  /** Whether the channel is connected now (READY). */
  ready(): boolean;
  /**
   * Optional: resolves true only when the backend refuses a TCP connection now (a cheaper stand-in for an Export
   * call while connections are refused; see refusal-probe.ts). Absent: callers make the call.
   */
  refusedNow?(timeoutMs: number): Promise<boolean>;
  /** Closes the channel once the calls in flight have ended. Idempotent. */
  close(): void;
}

/** The PEM file at `path` of the setting `key` (null when unset); throws TransportConfigError when it cannot be read. */
export function readPem(key: string, path: string): Buffer | null {
  if (!path) return null;
  try {
    return readFileSync(path);
  } catch (e) {
    throw new TransportConfigError(key, `cannot read ${path}: ${(e as Error).message}`);
  }
}

/** The ExportOutcome of an Export answer (OTLP/gRPC or OTLP/HTTP 2xx): a partial_success in it rejects that many items. */
export function successOf(signal: Signal, response: Uint8Array | undefined): ExportOutcome {
  if (!response || response.length === 0) return { kind: "success", rejected: 0, message: "" };
  try {
    const decoded = otlpType(SERVICES[signal].response).decode(response) as unknown as {
      partialSuccess?: Record<string, unknown> & { errorMessage?: string };
    };
    const ps = decoded.partialSuccess;
    if (!ps) return { kind: "success", rejected: 0, message: "" };
    const rejected = Number(ps[SERVICES[signal].rejectedField] ?? 0);
    return { kind: "success", rejected: Number.isFinite(rejected) && rejected > 0 ? rejected : 0, message: ps.errorMessage ?? "" };
  } catch {
    return { kind: "success", rejected: 0, message: "undecodable response" };
  }
}
