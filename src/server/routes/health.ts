/** GET /healthz (liveness) and GET /ready (readiness), answered from the status aggregator. */
import { Elysia } from "elysia";
import { jsonAnswer } from "../answer";
import type { ServerDeps } from "../deps";
import { COMMON_ERRORS, HealthSchema, ReadinessSchema, responses, UnhealthySchema } from "../model";

export function healthRoutes(deps: ServerDeps, prefix = "", check = true) {
  const healthy = jsonAnswer(HealthSchema, check);
  const unhealthy = jsonAnswer(UnhealthySchema, check);
  const readiness = jsonAnswer(ReadinessSchema, check);
  return new Elysia({ name: "routes/health", seed: `${prefix}:${check}`, prefix })
    .get(
      "/healthz",
      ({ set }) => {
        const h = deps.status.health();
        if (h.healthy) return healthy(set, 200, { status: "ok" });
        return unhealthy(set, 503, { status: "unhealthy", reasons: h.reasons });
      },
      {
        response: responses(check, { 200: HealthSchema, 503: UnhealthySchema, ...COMMON_ERRORS }),
        detail: { summary: "Liveness", description: "200 while the event loop answers and no component is in a fatal state.", tags: ["health"] },
      },
    )
    .get(
      "/ready",
      ({ set }) => {
        const r = deps.status.readiness();
        return readiness(set, r.ready ? 200 : 503, { status: r.ready ? "ready" : "not_ready", checks: r.checks });
      },
      {
        response: responses(check, { 200: ReadinessSchema, 503: ReadinessSchema, ...COMMON_ERRORS }),
        detail: { summary: "Readiness", description: "200 when the ebpf, otlp, discovery and memory checks all pass; 503 with the failing check as `failed: <reason>` (memory: the agent is above its memory soft limit and refuses new data).", tags: ["health"] },
      },
    );
}
