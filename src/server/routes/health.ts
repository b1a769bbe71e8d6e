/** GET /healthz (liveness) and GET /ready (readiness), answered from the status aggregator. */
import { Elysia, status } from "elysia";
import type { ServerDeps } from "../deps";
import { answer, COMMON_ERRORS, HealthSchema, ReadinessSchema, UnhealthySchema } from "../model";

export function healthRoutes(deps: ServerDeps, prefix = "", check = true) {
  return new Elysia({ name: "routes/health", seed: `${prefix}:${check}`, prefix })
    .get(
      "/healthz",
      () => {
        const h = deps.status.health();
        if (h.healthy) return { status: "ok" as const };
        return status(503, { status: "unhealthy" as const, reasons: h.reasons });
      },
      {
        response: { 200: answer(HealthSchema, check), 503: answer(UnhealthySchema, check), ...COMMON_ERRORS },
        detail: { summary: "Liveness", description: "200 while the event loop answers and no component is in a fatal state.", tags: ["health"] },
      },
    )
    .get(
      "/ready",
      () => {
        const r = deps.status.readiness();
        const body = { status: r.ready ? ("ready" as const) : ("not_ready" as const), checks: r.checks };
        return r.ready ? body : status(503, body);
      },
      {
        response: { 200: answer(ReadinessSchema, check), 503: answer(ReadinessSchema, check), ...COMMON_ERRORS },
        detail: { summary: "Readiness", description: "200 when the ebpf, otlp and discovery checks all pass; 503 with the failing check as `failed: <reason>`.", tags: ["health"] },
      },
    );
}
