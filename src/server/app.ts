/**
 * createServer composes the route plugins and returns the Elysia app without listening,
 * so tests call `app.handle(new Request(...))`; only the server component listens.
 */
import { Elysia } from "elysia";
import type { Agent } from "../agent/agent";

export function createServer(agent: Agent) {
  return new Elysia({ name: "svc-agent" })
    .get("/healthz", ({ set }) => {
      const h = agent.status.health();
      if (h.healthy) return { status: "ok" };
      set.status = 503;
      return { status: "unhealthy", reasons: h.reasons };
    })
    .get("/ready", ({ set }) => {
      const r = agent.status.readiness();
      if (!r.ready) set.status = 503;
      return { status: r.ready ? "ready" : "not_ready", checks: r.checks };
    });
}

export type App = ReturnType<typeof createServer>;
