/** POST /admin/reload, POST /admin/flush, and GET /admin/logs (the recent log records, in any mode). */
import { Elysia, t } from "elysia";
import { msOf } from "../../config/units";
import { ConfigError } from "../../config/problems";
import type { ServerDeps } from "../deps";
import { ApiError } from "../errors";
import { ErrorSchema, FlushSchema, PRIVILEGED_ERRORS, ReloadSchema } from "../model";

const errors = PRIVILEGED_ERRORS;

export function adminRoutes(deps: ServerDeps, prefix = "") {
  return new Elysia({ name: "routes/admin", seed: prefix, prefix })
    .post(
      "/admin/reload",
      async () => {
        const r = await deps.reload("admin");
        if (r.ok) return { status: "ok" as const, message: r.message };
        if (r.kind === "invalid") {
          const problems = r.error instanceof ConfigError ? r.error.problems : [];
          throw new ApiError(400, "invalid_request", "invalid configuration; the running configuration is unchanged", { problems });
        }
        throw new ApiError(500, "internal_error", `reload failed; the previous configuration was restored: ${r.error.message}`, {});
      },
      {
        response: { 200: ReloadSchema, 400: ErrorSchema, ...errors },
        detail: {
          summary: "Reload the configuration file",
          description: "Re-reads the file the agent started with, validates it and applies it atomically. 400 lists every problem in `details.problems` (key paths); 500 means applying failed and the previous configuration was restored.",
          tags: ["admin"],
        },
      },
    )
    .get("/admin/logs", () => ({ records: deps.logger.recent() }), {
      response: { 200: t.Object({ records: t.Array(t.Record(t.String(), t.Unknown())) }), ...errors },
      detail: {
        summary: "Recent log records",
        description:
          "The agent's ring of recent log records, oldest first, as written (secrets scrubbed): at most svc.recent_records records and 1 MiB, a record over 4 KiB shortened. Served in every mode, to full tokens only; the diagnostics bundle saves it.",
        tags: ["admin"],
      },
    })
    .post(
      "/admin/flush",
      async () => {
        const r = await deps.pipeline.flush(msOf(deps.config(), "shutdown_timeout"));
        return {
          status: r.reason ? ("incomplete" as const) : ("ok" as const),
          flushed: r.exported,
          dropped: r.dropped,
          remaining: r.remaining,
          reason: r.reason ?? null,
          last_error: r.lastError ?? null,
        };
      },
      {
        response: { 200: FlushSchema, ...errors },
        detail: {
          summary: "Flush the export queues",
          description:
            "Hands the collectors' pending aggregates (connection, syscall and GPU metrics) to the queues, tries every queued item and every batch waiting to be retried at once (cutting the backoff short), and waits until nothing is pending, every pending batch has failed again, or shutdown_timeout passed. Reports the items exported, dropped and remaining per kind; `status` is `incomplete` with a `reason` when items remain.",
          tags: ["admin"],
        },
      },
    );
}
