/** What one export attempt came to, and how the OTLP specification classifies gRPC status codes. */
// The status codes alone: the package's index would load all of grpc-js (see transport-select.ts).
import { Status as GrpcStatus } from "@grpc/grpc-js/build/src/constants";
import { scrubText } from "../log/scrub";

/**
 * - `success`: accepted; `rejected` items of it were refused by a partial success answer.
 * - `retryable`: may succeed later (OTLP retryable codes); `delayMs` is the server's RetryInfo delay, if given.
 * - `failure`: will not succeed by resending; the batch is dropped.
 */
export type ExportOutcome =
  | { kind: "success"; rejected: number; message: string }
  | { kind: "retryable"; code: number; message: string; delayMs: number | undefined }
  | { kind: "failure"; code: number; message: string };

/** Codes retried by the OTLP specification (RESOURCE_EXHAUSTED only when the server sends RetryInfo). */
export const RETRYABLE_CODES: ReadonlySet<number> = new Set([
  GrpcStatus.CANCELLED,
  GrpcStatus.DEADLINE_EXCEEDED,
  GrpcStatus.ABORTED,
  GrpcStatus.OUT_OF_RANGE,
  GrpcStatus.UNAVAILABLE,
  GrpcStatus.DATA_LOSS,
]);

/** Codes that mean the backend could not be reached or refuses this agent (readiness fails); others reject one batch only. */
const UNREACHABLE_CODES: ReadonlySet<number> = new Set([
  GrpcStatus.CANCELLED,
  GrpcStatus.UNKNOWN,
  GrpcStatus.DEADLINE_EXCEEDED,
  GrpcStatus.PERMISSION_DENIED,
  GrpcStatus.UNIMPLEMENTED,
  GrpcStatus.INTERNAL,
  GrpcStatus.UNAVAILABLE,
  GrpcStatus.UNAUTHENTICATED,
]);

/** The name of a gRPC status code (`UNAVAILABLE`). */
export function codeName(code: number): string {
  return (GrpcStatus as unknown as Record<number, string>)[code] ?? `CODE_${code}`;
}

/** Whether an outcome means the backend is unreachable for this agent (drives readiness `otlp`). */
export function isUnreachable(o: ExportOutcome): boolean {
  return o.kind !== "success" && UNREACHABLE_CODES.has(o.code);
}

/** readinessReason of a refused connection. */
export const REFUSED_REASON = "connection refused";

/** A short reason for /ready (`connection refused`, `deadline exceeded`, `unauthenticated`...). */
export function readinessReason(o: Exclude<ExportOutcome, { kind: "success" }>): string {
  const m = o.message.toLowerCase();
  if (m.includes("econnrefused") || m.includes("connection refused")) return REFUSED_REASON;
  if (m.includes("enotfound") || m.includes("name resolution")) return "name resolution failed";
  if (m.includes("certificate") || m.includes("ssl") || m.includes("tls")) return `tls handshake failed: ${o.message}`;
  return codeName(o.code).toLowerCase().replaceAll("_", " ");
}

/** `last_error` text: code name and message. */
export function describe(o: Exclude<ExportOutcome, { kind: "success" }>): string {
  return `${codeName(o.code)}: ${o.message}`;
}

/**
 * The outcome with `secrets` (the target's header values) replaced in its message: a backend that echoes the
 * API key it refuses ("invalid api key ...") must not put it into last_error (/status/export, /admin/flush).
 */
export function withoutSecrets(o: ExportOutcome, secrets: readonly string[]): ExportOutcome {
  if (secrets.length === 0 || o.message === "") return o;
  const message = scrubText(o.message, secrets);
  return message === o.message ? o : { ...o, message };
}

/** The values of `headers` worth scrubbing from messages (shorter ones would redact ordinary words). */
export function headerSecrets(headers: Record<string, string>): string[] {
  return Object.values(headers).filter((v) => v.trim().length >= 4);
}
