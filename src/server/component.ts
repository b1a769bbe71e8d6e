/**
 * The HTTP interface as a component: binds self_telemetry.listen at start (failure is a permanent error
 * that stops the agent, never only a log line). The listener owns its address alone: no SO_REUSEPORT, so a
 * second process (another agent included) cannot bind it too and take half of its requests. A reload rebuilds
 * the routes (metrics path, CORS) and rebinds when the address changes, binding the new address before
 * releasing the old one; a reload that keeps the address but changes Bun's own limits rebinds it in place.
 */
import type { Config } from "../config/schema";
import type { Component, ComponentHost } from "../lifecycle/component";
import { createServer, setClientAddress, type App } from "./app";
import type { ServerDeps } from "./deps";
import { RequestGuard } from "./guard";
import { formatAddress, parseListen } from "./listen";

export const HTTP_SERVER_ID = "server/http";
/** Seconds an idle keep-alive connection is kept. */
const IDLE_TIMEOUT_SECONDS = 30;
/** Bun's own body limit, relative to self_telemetry.max_body_bytes (see bind). */
const BUN_BODY_LIMIT_FACTOR = 16;
const BUN_BODY_LIMIT_SLACK_BYTES = 64 * 1024;
/** Time given to requests in flight on an old listener after a rebind. */
const OLD_LISTENER_GRACE_MS = 1000;

type BunServer = ReturnType<typeof Bun.serve>;

/** Whether `listen` names the address `server` is bound to (port 0 never does: it picks a new port). */
function holds(server: BunServer, listen: string): boolean {
  const { hostname, port } = parseListen(listen);
  return port !== 0 && port === server.port && hostname === server.hostname;
}

export function createHttpServerComponent(deps: ServerDeps): Component {
  let server: BunServer | undefined;
  let host: ComponentHost | undefined;
  const guard = new RequestGuard(deps.config);
  // Hot routes' answers are not re-checked against their schemas here (the tests do, see ServerOptions.checkAnswers).
  let app: App = createServer(deps, { guard, checkAnswers: false });

  const bind = (c: Config): BunServer => {
    const { hostname, port } = parseListen(c.self_telemetry.listen);
    try {
      return Bun.serve({
        hostname,
        port,
        // Bun sets SO_REUSEPORT unless told not to when `development` is false: two agents on one address then
        // both listen and the kernel splits connections between them.
        reusePort: false,
        fetch: (received, srv) => {
          // With an empty Host header Bun's URL has no scheme and authority ("/admin/reload"), in which the guard
          // and the router found different paths (a read-only token reached /admin and /debug): make it absolute.
          const url = received.url;
          const req = url.startsWith("/") ? new Request(`http://localhost${url}`, received) : received;
          // The address is read only when the guard needs it (a rate limit per client), from the settings it uses too.
          const limit = deps.config().self_telemetry.rate_limit;
          if (limit.enabled && limit.per_client) {
            const ip = srv.requestIP(received);
            if (ip) setClientAddress(req, ip.address);
          }
          // Profiles and traces answer after ?seconds=N (up to 300 s): no idle timeout while they sample.
          if (url.includes("/debug/pprof/")) srv.timeout(received, 0);
          // The composed handler itself (app.handle wraps it in one more async call).
          return app.fetch(req);
        },
        // The guard answers a declared Content-Length over max_body_bytes with 413 and the error object; Bun's own
        // limit (which answers first, with an empty body) sits well above it, as a backstop. No route reads a
        // body, so an undeclared (chunked) body is never buffered whole.
        maxRequestBodySize: c.self_telemetry.max_body_bytes * BUN_BODY_LIMIT_FACTOR + BUN_BODY_LIMIT_SLACK_BYTES,
        idleTimeout: IDLE_TIMEOUT_SECONDS,
        development: false,
      });
    } catch (e) {
      const why = (e as { code?: string }).code === "EADDRINUSE" ? "address already in use" : (e as Error).message;
      throw new Error(`cannot listen on ${c.self_telemetry.listen}: ${why}`);
    }
  };

  const announce = (s: BunServer) => {
    host?.logger.info("listening", { address: formatAddress(s.hostname ?? "0.0.0.0", s.port ?? 0) });
  };

  return {
    id: HTTP_SERVER_ID,
    startsEarly: true,
    async start(h) {
      host = h;
      const c = deps.config();
      if (!c.self_telemetry.enabled) {
        h.report("disabled");
        return;
      }
      server = bind(c);
      announce(server);
      h.report("ok");
    },
    async reload(next, previous) {
      const a = next.self_telemetry;
      const b = previous.self_telemetry;
      const rebind = a.enabled !== b.enabled || a.listen !== b.listen || a.max_body_bytes !== b.max_body_bytes;
      // Routes are built first (a bad setting throws before the listener changes), with next's build-time settings
      // (metrics path, CORS origins); the rest is read per request.
      const nextApp = createServer(deps, { guard, settings: next, checkAnswers: false });
      let fresh: BunServer | undefined;
      let old = server;
      if (rebind && a.enabled && old && holds(old, a.listen)) {
        // The address this listener holds (new limits, which Bun's server.reload does not change, or the port that
        // listen: ...:0 picked, now written down): it cannot be bound twice, so the old listener closes first
        // (requests in flight finish) and, if the new bind fails, the previous configuration is bound again.
        old.stop(false);
        try {
          fresh = bind(next);
        } catch (e) {
          try {
            server = bind(previous);
          } catch (again) {
            server = undefined;
            host?.report("permanent_error", (again as Error).message);
          }
          throw e;
        }
        old = undefined;
      } else if (rebind && a.enabled) {
        // Bind first: if the new address is taken, this throws and nothing has changed.
        fresh = bind(next);
      }
      app = nextApp;
      if (!rebind) return;
      server = fresh;
      if (old) {
        const closing = old;
        setTimeout(() => closing.stop(false), OLD_LISTENER_GRACE_MS).unref();
      }
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
