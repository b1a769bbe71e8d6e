/**
 * The HTTP interface as a component: binds self_telemetry.listen at start (failure is a permanent error
 * that stops the agent, never only a log line), rebinds when a reload changes the address, stops first
 * on shutdown.
 */
import type { Agent } from "../agent/agent";
import type { Config } from "../config/schema";
import type { Component, ComponentHost } from "../lifecycle/component";
import { createServer } from "./app";
import { formatAddress, parseListen } from "./listen";

export const HTTP_SERVER_ID = "server/http";

type BunServer = ReturnType<typeof Bun.serve>;

export function createHttpServerComponent(agent: Agent): Component {
  let server: BunServer | undefined;
  let host: ComponentHost | undefined;
  const app = createServer(agent);

  const bind = (c: Config): BunServer => {
    const { hostname, port } = parseListen(c.self_telemetry.listen);
    const s = Bun.serve({
      hostname,
      port,
      fetch: (req) => app.handle(req),
      maxRequestBodySize: c.self_telemetry.max_body_bytes,
      idleTimeout: 30,
      development: false,
      error: () => new Response(JSON.stringify({ error: "internal_error", message: "internal error", details: {} }), { status: 500, headers: { "content-type": "application/json" } }),
    });
    return s;
  };

  const announce = (s: BunServer) => {
    host?.logger.info("listening", { address: formatAddress(s.hostname ?? "0.0.0.0", s.port ?? 0) });
  };

  return {
    id: HTTP_SERVER_ID,
    async start(h) {
      host = h;
      const c = agent.config;
      if (!c.self_telemetry.enabled) {
        h.report("disabled");
        return;
      }
      try {
        server = bind(c);
      } catch (e) {
        throw new Error(`cannot listen on ${c.self_telemetry.listen}: ${(e as Error).message}`);
      }
      announce(server);
      h.report("ok");
    },
    async reload(next, previous) {
      const a = next.self_telemetry;
      const b = previous.self_telemetry;
      if (a.enabled === b.enabled && a.listen === b.listen && a.max_body_bytes === b.max_body_bytes) return;
      // Bind the new address before letting go of the old one, so a failure leaves the old server serving.
      const fresh = a.enabled ? bind(next) : undefined;
      const old = server;
      server = fresh;
      // Let the request that triggered the reload finish on the old server.
      setTimeout(() => old?.stop(false), 50);
      if (fresh) {
        announce(fresh);
        host?.report("ok");
      } else host?.report("disabled");
    },
    async shutdown() {
      const s = server;
      server = undefined;
      s?.stop(true);
    },
  };
}
