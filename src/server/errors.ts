/**
 * The standard error object `{error, message, details}` and the errors that produce it.
 * Every error answer of the interface goes through `errorResponse`; no stack trace ever leaves the process.
 */

export const ERROR_CODES = ["invalid_request", "not_found", "unauthorized", "forbidden", "internal_error", "service_unavailable"] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

export interface ErrorBody {
  error: ErrorCode;
  message: string;
  details: Record<string, unknown>;
}

/** An error with its code and HTTP status; thrown by handlers and guards, rendered by the one onError. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
    readonly details: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "ApiError";
  }
}

export const notFound = (path: string) => new ApiError(404, "not_found", `no resource at ${path}`, { path });
export const methodNotAllowed = (method: string, path: string, allow: string[]) =>
  new ApiError(405, "invalid_request", `method ${method} is not allowed on ${path}`, { method, path, allow }, { allow: allow.join(", ") });
export const unauthorized = (reason: string) =>
  new ApiError(401, "unauthorized", `authentication required: ${reason}`, {}, { "www-authenticate": 'Bearer realm="svc-agent"' });
export const forbidden = (path: string) =>
  new ApiError(403, "forbidden", `this token may not use ${path}`, { path });
export const tooManyRequests = (limit: number) =>
  new ApiError(429, "service_unavailable", `rate limit of ${limit} requests per second exceeded`, { requests_per_second: limit }, { "retry-after": "1" });
export const payloadTooLarge = (limit: number) =>
  new ApiError(413, "invalid_request", `request body larger than ${limit} bytes`, { max_body_bytes: limit });

export const JSON_HEADERS: Record<string, string> = {
  "content-type": "application/json",
  "x-content-type-options": "nosniff",
  "cache-control": "no-store",
};

export function errorBody(e: ApiError): ErrorBody {
  return { error: e.code, message: e.message, details: e.details };
}

export function errorResponse(e: ApiError): Response {
  return new Response(JSON.stringify(errorBody(e)), { status: e.status, headers: { ...JSON_HEADERS, ...e.headers } });
}
