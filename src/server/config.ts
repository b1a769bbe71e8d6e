/** Schema of `self_telemetry`: the agent's own HTTP interface. Owned by the server. */
import { Type, type Static } from "@sinclair/typebox";
import type { ConfigProblem } from "../config/problems";

const Strings = (def: string[], description: string) =>
  Type.Array(Type.String(), { default: def, description });

export const SelfTelemetrySchema = Type.Object(
  {
    enabled: Type.Boolean({ default: true, description: "Serve the HTTP interface." }),
    listen: Type.String({
      default: ":19090",
      minLength: 1,
      description: "Listen address host:port (\":19090\" is every address; port 0 picks a free one).",
    }),
    path: Type.String({
      default: "/metrics",
      pattern: "^/",
      description: "Path of the Prometheus metrics endpoint (also served under /api/v1); may not be or lie under a path the interface serves itself (/healthz, /ready, /status, /config, /debug, /admin, /openapi.json, /api).",
    }),
    prometheus_namespace: Type.String({
      default: "svc",
      pattern: "^[a-zA-Z_][a-zA-Z0-9_]*$",
      description: "Prefix of every metric name.",
    }),
    max_body_bytes: Type.Integer({ minimum: 0, default: 1_048_576, description: "Largest request body accepted (413 beyond)." }),
    auth: Type.Object(
      {
        enabled: Type.Boolean({ default: false, description: "Require Authorization: Bearer <token>." }),
        bearer_token: Type.String({ default: "", description: "The accepted token; write it as ${API_TOKEN}." }),
        read_only_tokens: Strings([], "Tokens that may read but not use /admin or /debug."),
        exempt_paths: Strings(["/healthz", "/ready"], "Paths served without a token (probes)."),
      },
      { additionalProperties: false, default: {} },
    ),
    rate_limit: Type.Object(
      {
        enabled: Type.Boolean({ default: false, description: "Turn on the token-bucket rate limit." }),
        requests_per_second: Type.Integer({ minimum: 1, default: 100, description: "Requests allowed per second (burst: one second's worth)." }),
        per_client: Type.Boolean({ default: false, description: "Count per client address instead of for all clients together." }),
        exempt_paths: Strings(["/healthz", "/ready"], "Paths never rate limited (probes)."),
      },
      { additionalProperties: false, default: {} },
    ),
    cors: Type.Object(
      {
        enabled: Type.Boolean({ default: false, description: "Answer CORS for browser access." }),
        allowed_origins: Strings([], "Origins allowed by CORS."),
      },
      { additionalProperties: false, default: {} },
    ),
    tracing: Type.Object(
      {
        enabled: Type.Boolean({ default: false, description: "Self-tracing of internal operations." }),
        sample_rate: Type.Number({ minimum: 0, maximum: 1, default: 0.01, description: "Fraction of internal operations traced." }),
      },
      { additionalProperties: false, default: {} },
    ),
    debug: Type.Object(
      {
        enabled: Type.Boolean({ default: false, description: "Serve /debug/*. Also --debug or SVC_DEBUG=true." }),
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false, default: {} },
);
export type SelfTelemetryConfig = Static<typeof SelfTelemetrySchema>;

/**
 * Paths the interface serves itself (each also under /api/v1, which is reserved with all of /api): the metrics
 * path may be none of them nor lie under or above one, or the metrics text would be served in its place. A test
 * checks that every route of the interface lies under one of these.
 */
export const RESERVED_PATHS = ["/healthz", "/ready", "/status", "/config", "/debug", "/admin", "/openapi.json", "/api"] as const;

/** Segments of unreserved URL characters (RFC 3986), no "." or ".." segment; ":" and "*" would be route patterns. */
const METRICS_PATH_RE = /^(\/[A-Za-z0-9._~-]+)+\/?$/;

function metricsPathProblem(path: string): string | undefined {
  if (!METRICS_PATH_RE.test(path) || path.split("/").some((s) => s === "." || s === ".."))
    return `expected a path of /-separated segments of letters, digits and . _ ~ - (no "." or ".." segment), got ${JSON.stringify(path)}`;
  const p = path.replace(/\/+$/, "");
  const clash = RESERVED_PATHS.find((r) => p === r || p.startsWith(r + "/") || r.startsWith(p + "/"));
  if (clash)
    return `${JSON.stringify(path)} would shadow the interface's own ${clash} route; the metrics path may not be or lie under any of ${RESERVED_PATHS.join(", ")}`;
  return undefined;
}

/** Cross-field rules of `self_telemetry`. */
export function validateSelfTelemetry(c: SelfTelemetryConfig): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  if (c.auth.enabled && c.auth.bearer_token.length === 0)
    problems.push({ path: "self_telemetry.auth.bearer_token", message: "must be set when self_telemetry.auth.enabled is true" });
  if (c.cors.enabled && c.cors.allowed_origins.length === 0)
    problems.push({ path: "self_telemetry.cors.allowed_origins", message: "must list at least one origin when self_telemetry.cors.enabled is true" });
  const pathProblem = metricsPathProblem(c.path);
  if (pathProblem) problems.push({ path: "self_telemetry.path", message: pathProblem });
  if (!/^(\[[0-9a-fA-F:.]+\]|[^:\s]*):\d{1,5}$/.test(c.listen) || Number(c.listen.slice(c.listen.lastIndexOf(":") + 1)) > 65535)
    problems.push({ path: "self_telemetry.listen", message: `expected host:port with a port from 0 to 65535, got ${JSON.stringify(c.listen)}` });
  return problems;
}
