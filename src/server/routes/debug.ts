/**
 * /debug/pprof/* and /debug/vars: served only in debug mode (otherwise 404 not_found, like any unknown path).
 * debug-vars.ts and debug-profiles.ts build the answers from src/debug; this file routes and gates.
 */
import { Elysia, t } from "elysia";
import { debugVars } from "./debug-vars";
import { PROFILES, profileResponse } from "./debug-profiles";
import type { ServerDeps } from "../deps";
import { notFound } from "../errors";
import { DebugVarsSchema, ErrorSchema, PRIVILEGED_ERRORS } from "../model";
import type { MediaOverride } from "./openapi";

const errors = { ...PRIVILEGED_ERRORS, 404: ErrorSchema, 503: ErrorSchema };

export function debugRoutes(deps: ServerDeps, prefix = "") {
  const gate = ({ request }: { request: Request }) => {
    if (!deps.config().self_telemetry.debug.enabled) throw notFound(new URL(request.url).pathname);
  };
  return new Elysia({ name: "routes/debug", seed: prefix, prefix })
    .get("/debug/vars", () => debugVars(deps), {
      beforeHandle: gate,
      response: { 200: DebugVarsSchema, ...errors },
      detail: { summary: "Runtime variables (expvar-like)", tags: ["debug"] },
    })
    .get("/debug/pprof/", ({ request }) => profileResponse(deps, "index", new URL(request.url)), {
      beforeHandle: gate,
      response: { 200: t.String({ description: "HTML index of the profiles." }), ...errors },
      detail: { summary: "Index of profiles", tags: ["debug"], "x-media": { 200: { "text/html; charset=utf-8": { schema: { type: "string" } } } } satisfies MediaOverride },
    })
    .get("/debug/pprof/:profile", ({ params, request }) => profileResponse(deps, params.profile, new URL(request.url), request.signal), {
      beforeHandle: gate,
      params: t.Object({ profile: t.Union(PROFILES.map((p) => t.Literal(p))) }),
      query: t.Object({
        seconds: t.Optional(t.Integer({ minimum: 1, maximum: 300, description: "Duration of CPU sampling or tracing." })),
        debug: t.Optional(t.Integer({ minimum: 0, maximum: 2, description: "goroutine: 1 counts, 2 full stacks as text." })),
        gc: t.Optional(t.Integer({ minimum: 0, maximum: 1 })),
        snapshot: t.Optional(t.Integer({ minimum: 0, maximum: 1, description: "heap/allocs: 1 walks a heap snapshot for sizes per type (slow)." })),
      }),
      response: { 200: t.Unknown({ description: "profile.proto (gzip), text, or trace-event JSON (gzip) depending on the profile." }), 400: ErrorSchema, ...errors },
      detail: {
        summary: "A profile: profile, heap, goroutine, threadcreate, block, mutex, allocs, trace",
        tags: ["debug"],
        "x-media": {
          200: {
            "application/octet-stream": { schema: { description: "profile.proto, gzip-compressed (what `go tool pprof` reads): every profile but trace and goroutine?debug=1|2." } },
            "text/plain; charset=utf-8": { schema: { type: "string", description: "goroutine?debug=1 (counts) and ?debug=2 (stacks)." } },
            "application/gzip": { schema: { description: "trace: Chrome trace-event JSON, gzip-compressed." } },
          },
        } satisfies MediaOverride,
      },
    });
}
