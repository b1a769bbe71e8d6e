/**
 * createServer composes the route plugins and returns the Elysia app without listening, so tests call
 * `app.handle(new Request(...))`; only the server component listens. Every route is served at its path
 * and under /api/v1. One onError renders every error as the standard error object.
 */
import { cors } from "@elysiajs/cors";
import { Elysia, ElysiaCustomStatusResponse, type AnyElysia, type Context } from "elysia";
import type { Config } from "../config/schema";
import type { TaskOutcome } from "../telemetry/tasks";
import { SECURITY_HEADERS } from "./answer";
import type { ServerDeps } from "./deps";
import { ApiError, errorResponse, methodNotAllowed, notFound } from "./errors";
import { API_V1_PREFIX, canonicalPath, pathOf, RequestGuard } from "./guard";
import { adminRoutes } from "./routes/admin";
import { configRoutes } from "./routes/config";
import { debugRoutes } from "./routes/debug";
import { healthRoutes } from "./routes/health";
import { metricsRoutes } from "./routes/metrics";
import { buildOpenApiDocument, openApiRoutes } from "./routes/openapi";
import { statusRoutes } from "./routes/status";

/** Client addresses of requests, set by the listener (app.handle has no socket). */
const clientAddresses = new WeakMap<Request, string>();
export function setClientAddress(request: Request, address: string): void {
  clientAddresses.set(request, address);
}


/**
 * Where a request's in-flight operation is kept: on the request's `set` (one object per request, shared by its hooks).
 * Hooks destructure the context: Elysia reads their parameters to decide what to prepare per request (a hook that
 * takes the whole context makes it parse headers, cookies and query string of every request).
 */
const OPERATION = Symbol("operation");
type WithOperation = { [OPERATION]?: (outcome?: TaskOutcome) => void };

/** How long a browser may cache a preflight's answer. */
const CORS_MAX_AGE_SECONDS = "600";

const statusOutcomes = new Map<number, TaskOutcome>();
/** The outcome of an HTTP operation that ended with `status`, one frozen object per status. */
function statusOutcome(status: number): TaskOutcome {
  let o = statusOutcomes.get(status);
  if (!o) statusOutcomes.set(status, (o = Object.freeze({ attributes: Object.freeze({ "http.response.status_code": status }) })));
  return o;
}

export interface ServerOptions {
  /** Shared across app rebuilds so rate-limit buckets survive a reload that does not change them. */
  guard?: RequestGuard;
  /** The configuration whose build-time settings (metrics path, CORS) shape the routes; default: deps.config(). */
  settings?: Config;
  /**
   * Check the answers of the hot routes (/healthz, /ready, /status*, the metrics path) against their schemas at run
   * time (default true, as in the tests). The listener turns it off: the tests check those answers, and every live
   * answer of every endpoint against the OpenAPI document. Those routes then carry no answer schemas (Elysia would
   * compile them at each route's first request); the schemas still type the handlers, and the document is generated
   * from the routes made with checks on. Other routes are always checked, except the metrics text (bytes, see
   * routes/metrics.ts).
   */
  checkAnswers?: boolean;
}

export function createServer(deps: ServerDeps, options: ServerOptions = {}) {
  const settings = options.settings ?? deps.config();
  const c = settings.self_telemetry;
  const guard = options.guard ?? new RequestGuard(deps.config);
  const check = options.checkAnswers ?? true;
  const tasks = deps.tasks;
  /** Ends the request's operation with its HTTP status (outcome objects shared per status: observers only read them). */
  const endOperation = (set: unknown, status: number) => {
    (set as WithOperation)[OPERATION]?.(statusOutcome(status));
  };

  const routes = (prefix: string) =>
    new Elysia({ name: "routes", seed: `${prefix}:${check}` })
      .use(healthRoutes(deps, prefix, check))
      .use(metricsRoutes(deps, c.path, prefix, check))
      .use(statusRoutes(deps, prefix, check))
      .use(configRoutes(deps, prefix))
      .use(debugRoutes(deps, prefix))
      .use(adminRoutes(deps, prefix));

  let document: Record<string, unknown> | undefined;
  const corsOn = c.cors.enabled;
  // standardHostname false: Elysia otherwise finds the path from the 11th character of the URL, so a short Host
  // header ("ab") made it route a different path than the guard checked (a read-only token reached /admin).
  const app: AnyElysia = new Elysia({ name: "svc-agent", handler: { standardHostname: false } })
    .headers(SECURITY_HEADERS)
    // CORS before the guard: the headers it puts on the request's answer go on every answer to an allowed origin,
    // the guard's 401, 403, 413 and 429 included (a browser script can read them). Its preflight route is off (a
    // catch-all OPTIONS route made every unknown path a 405): preflights are answered below, after the guard, so
    // they are rate limited like any request.
    .use(
      corsOn
        ? cors({
            origin: c.cors.allowed_origins,
            methods: ["GET", "POST", "OPTIONS"],
            allowedHeaders: ["Authorization", "Content-Type"],
            exposeHeaders: ["Retry-After", "WWW-Authenticate", "Allow"],
            // Browsers refuse `Access-Control-Allow-Origin: *` together with credentials; the bearer token travels in
            // an Authorization header, which needs no credentials mode. So: "*" answers "*" without credentials, a
            // list of origins answers the matching origin with credentials allowed.
            credentials: !c.cors.allowed_origins.includes("*"),
            preflight: false,
          })
        : new Elysia({ name: "cors-disabled" }),
    )
    // `path` is the one Elysia found in the URL and routes on (its request context has it before routing; its
    // types do not say so): the guard checks exactly the path the router serves, without parsing the URL again.
    .onRequest((({ request, set, path: urlPath }: { request: Request; set: Context["set"]; path: string }) => {
      const path = canonicalPath(urlPath);
      try {
        guard.check(request, path, clientAddresses.get(request) ?? "unknown");
      } catch (e) {
        if (e instanceof ApiError) return errorResponse(e);
        throw e;
      }
      // The CORS layer has set the origin, methods and headers on `set`.
      if (corsOn && request.method === "OPTIONS") {
        set.headers["access-control-max-age"] = CORS_MAX_AGE_SECONDS;
        return new Response(null, { status: 204 });
      }
      (set as WithOperation)[OPERATION] = tasks.begin(`http ${request.method} ${path}`, "operation");
    }) as never)
    // The in-flight operation ends when the handler has produced its answer (an afterResponse hook would cost a
    // setImmediate per request: measured ~8 us of the ~30 us the interface adds to a probe).
    .onAfterHandle({ as: "global" }, ({ set, response }) => {
      const status =
        response instanceof Response
          ? response.status
          : response instanceof ElysiaCustomStatusResponse
            ? Number(response.code)
            : typeof set.status === "number"
              ? set.status
              : 200;
      endOperation(set, status);
    })
    .onError({ as: "global" }, ({ code, error, request, set }) => {
      const response = renderError(code, error, request, app, deps, corsOn);
      endOperation(set, response.status);
      return response;
    })
    .use(routes(""))
    .use(routes(API_V1_PREFIX))
    .use(openApiRoutes(() => (document ??= openApiDocument())))
    .use(openApiRoutes(() => (document ??= openApiDocument()), API_V1_PREFIX));
  // Routes whose answers are not checked carry no answer schemas (model.ts `responses`): the document comes from the
  // same routes made with checks on, built once, on the first request for it.
  const openApiDocument = () => buildOpenApiDocument(check ? app : createServer(deps, { ...options, settings, checkAnswers: true }), deps);
  return app;
}

export type App = ReturnType<typeof createServer>;

function renderError(code: string | number, error: unknown, request: Request, app: AnyElysia, deps: ServerDeps, corsOn: boolean): Response {
  // Not new URL(): an empty Host header gives "http:///path", which it refuses (a 500 from Bun's fallback).
  const url = { pathname: pathOf(request.url) };
  if (error instanceof ApiError) return errorResponse(error);
  switch (code) {
    case "NOT_FOUND": {
      const allow = allowedMethods(app, url.pathname);
      // With CORS on, OPTIONS is answered on every path (preflights).
      if (allow.length > 0) return errorResponse(methodNotAllowed(request.method, url.pathname, corsOn ? [...allow, "OPTIONS"].sort() : allow));
      return errorResponse(notFound(url.pathname));
    }
    case "VALIDATION": {
      const e = error as { type?: string; all?: Array<{ path: string; message: string }>; message?: string };
      if (e.type === "response") {
        deps.logger.error("answer does not match its schema", { path: url.pathname, error: summary(e) });
        return errorResponse(new ApiError(500, "internal_error", "internal error", {}));
      }
      const problems = (e.all ?? []).map((p) => ({ path: p.path, message: p.message }));
      return errorResponse(new ApiError(400, "invalid_request", `invalid ${e.type ?? "request"}`, { problems }));
    }
    case "PARSE":
      return errorResponse(new ApiError(400, "invalid_request", "malformed request body", {}));
    case "INVALID_COOKIE_SIGNATURE":
      return errorResponse(new ApiError(400, "invalid_request", "invalid cookie", {}));
    default: {
      const status = typeof code === "number" ? code : 500;
      if (status >= 400 && status < 500) return errorResponse(new ApiError(status, "invalid_request", String((error as Error)?.message ?? "bad request"), {}));
      deps.logger.error("request failed", { method: request.method, path: url.pathname, error: (error as Error)?.message ?? String(error) });
      return errorResponse(new ApiError(500, "internal_error", "internal error", {}));
    }
  }
}

function summary(e: unknown): string {
  const m = (e as Error).message ?? String(e);
  return m.length > 500 ? m.slice(0, 500) + "..." : m;
}

const methodTables = new WeakMap<AnyElysia, Array<{ re: RegExp; method: string }>>();

/** Methods served at `pathname` (for 405 + Allow). */
function allowedMethods(app: AnyElysia, pathname: string): string[] {
  let table = methodTables.get(app);
  if (!table) {
    table = app.routes
      .filter((r) => r.method !== "ALL")
      .map((r) => ({
        method: r.method,
        re: new RegExp("^" + r.path.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/:[^/]+/g, "[^/]+").replace(/\*/g, ".*") + "$"),
      }));
    methodTables.set(app, table);
  }
  return [...new Set(table.filter((r) => r.re.test(pathname)).map((r) => r.method))].sort();
}
