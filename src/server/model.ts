/**
 * Schemas of the interface's answers. They validate the handlers' results, type them
 * (`typeof X.static`), and generate /openapi.json. Each subsystem's view and its part of /status come from its
 * own status.ts (src/ebpf, src/export, src/discovery, src/collectors/profiling, src/memory).
 */
import { Type, type TSchema } from "@sinclair/typebox";
import { t } from "elysia";
import { EbpfSummarySchema } from "../ebpf/status";
import { ExportSummarySchema } from "../export/status";
import { DiscoverySummarySchema } from "../discovery/status";
import { ProfilingViewSchema } from "../collectors/profiling/status";
import { MemoryViewSchema } from "../memory/status";

export const ErrorSchema = t.Object(
  {
    error: t.Union(
      [
        t.Literal("invalid_request"),
        t.Literal("not_found"),
        t.Literal("unauthorized"),
        t.Literal("forbidden"),
        t.Literal("internal_error"),
        t.Literal("service_unavailable"),
      ],
      { description: "Error code (one of ERROR_CODES)." },
    ),
    message: t.String({ description: "Human-readable text." }),
    details: t.Record(t.String(), t.Unknown(), { description: "Additional context." }),
  },
  { title: "Error" },
);

export const HealthSchema = t.Object({
  status: t.Literal("ok"),
});
export const UnhealthySchema = t.Object({
  status: t.Literal("unhealthy"),
  reasons: t.Array(t.String(), { description: "Components in a fatal state, with the reason." }),
});

const CheckValue = t.String({ description: "`ok`, or `failed: <reason>`.", pattern: "^(ok|failed: .+)$" });
export const ReadinessSchema = t.Object({
  status: t.Union([t.Literal("ready"), t.Literal("not_ready")]),
  checks: t.Object({ ebpf: CheckValue, otlp: CheckValue, discovery: CheckValue, memory: CheckValue }),
});

export const StatusSchema = t.Object({
  version: t.String(),
  commit: t.String(),
  built: t.String({ description: "Build timestamp (ISO 8601 UTC), or `dev` when run from source." }),
  uptime: t.String({ pattern: "^\\d+h\\d+m\\d+s$", description: "<h>h<m>m<s>s" }),
  mode: t.Literal("agent"),
  host: t.Object({ name: t.String(), os: t.String(), arch: t.String(), kernel: t.String() }),
  ebpf: EbpfSummarySchema,
  profiling: ProfilingViewSchema,
  export: ExportSummarySchema,
  discovery: DiscoverySummarySchema,
  memory: MemoryViewSchema,
});
export type StatusBody = typeof StatusSchema.static;

export const ReloadSchema = t.Object({
  status: t.Literal("ok"),
  message: t.String(),
});

const FlushCounts = (what: string) =>
  t.Object(
    {
      traces: Type.Integer({ minimum: 0 }),
      metrics: Type.Integer({ minimum: 0 }),
      logs: Type.Integer({ minimum: 0 }),
      profiles: Type.Integer({ minimum: 0 }),
    },
    { description: what },
  );

export const FlushSchema = t.Object({
  status: t.Union([t.Literal("ok"), t.Literal("incomplete")], { description: "`ok`: nothing remains pending; `incomplete`: items remain (see `reason`)." }),
  flushed: FlushCounts("Items exported while the flush ran, per kind."),
  dropped: FlushCounts("Items dropped for good while it ran (permanent errors, partial success), per kind."),
  remaining: FlushCounts("Items still queued or being sent when it ended, per kind."),
  reason: t.Union([t.Literal("export_failed"), t.Literal("timeout"), t.Literal("not_running"), t.Null()], {
    description:
      "Why items remain (null when none do): `export_failed`, every pending batch was tried after the flush began and failed again; `timeout`, shutdown_timeout passed while items were being sent; `not_running`, the exporter is not running.",
  }),
  last_error: t.Union([t.String(), t.Null()], { description: "The last export error of a batch still pending (`CODE: message`), or null." }),
});

export const DebugVarsSchema = t.Object(
  {
    cmdline: t.Array(t.String()),
    memstats: t.Object(
      {
        Alloc: Type.Integer(),
        TotalAlloc: Type.Integer(),
        Sys: Type.Integer(),
        NumGC: Type.Integer(),
      },
      { additionalProperties: Type.Integer() },
    ),
  },
  { additionalProperties: true },
);

/**
 * `schema` as an answer schema Elysia does not check (`noValidate`): it still types the handler and documents the
 * answer.
 */
export function unchecked<T extends TSchema>(schema: T): T {
  return { ...schema, noValidate: true };
}

/**
 * A hot route's `response`: its answer schemas when answers are checked at run time (tests), else none. Elysia
 * compiles a validator for every status of a route's `response` at the route's first request, checked or not (a
 * first /healthz took 13-20 ms with its six statuses, 5.5-10 ms with none); the listener checks no hot route's
 * answers (createServer's checkAnswers), and builds its OpenAPI document from the same routes made with checks on.
 */
export function responses<R extends Record<number, TSchema>>(check: boolean, record: R): R | undefined {
  return check ? record : undefined;
}

/**
 * Error answers any route can give: 401 (auth on), 413 (a declared body over max_body_bytes), 429 (rate limit on),
 * 500 (a failure inside the agent). Their descriptions and headers are added by the OpenAPI document's builder.
 */
export const COMMON_ERRORS = { 401: ErrorSchema, 413: ErrorSchema, 429: ErrorSchema, 500: ErrorSchema } as const;
/** Plus 403 for routes that read-only tokens may not use. */
export const PRIVILEGED_ERRORS = { ...COMMON_ERRORS, 403: ErrorSchema } as const;
