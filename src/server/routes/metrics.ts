/**
 * GET <self_telemetry.path>: Prometheus text exposition (or OpenMetrics when the Accept header asks),
 * gzip when Accept-Encoding allows.
 */
import { Elysia, t } from "elysia";
import type { ServerDeps } from "../deps";
import { answer, COMMON_ERRORS } from "../model";
import { OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE } from "../../telemetry/exposition";

const OPENMETRICS = "application/openmetrics-text";
const GZIP_MIN_BYTES = 1024;

export function metricsRoutes(deps: ServerDeps, path: string, prefix = "") {
  return new Elysia({ name: "routes/metrics", seed: prefix, prefix }).get(
    path,
    // The answer is built once by Elysia from `set.headers` (returning a Response would make Elysia copy it to
    // merge the interface's default headers: measured ~20% of a scrape). The body is the text's UTF-8 bytes as the
    // exposition writes them (a string of hundreds of pieces cost as much to flatten into the body as to format).
    async ({ request, set }) => {
      const openMetrics = (request.headers.get("accept") ?? "").includes(OPENMETRICS);
      const body = await deps.metrics.renderBytes(openMetrics);
      set.headers["content-type"] = openMetrics ? OPENMETRICS_CONTENT_TYPE : PROMETHEUS_CONTENT_TYPE;
      if (body.length >= GZIP_MIN_BYTES && /\bgzip\b/.test(request.headers.get("accept-encoding") ?? "")) {
        // Binary: a Response of its own (the 200 schema documents the text; compression is transport).
        set.headers["content-encoding"] = "gzip";
        set.headers.vary = "Accept-Encoding";
        // Elysia's handler type pairs the route's schema with plain bodies; a Response passes through unchecked.
        return new Response(Bun.gzipSync(body), { headers: set.headers as Record<string, string> }) as never as string;
      }
      // The 200 schema documents the text these bytes encode (it is not checked at run time, see below).
      return body as never as string;
    },
    {
      response: {
        // Never checked at run time: the handler answers the text as bytes (tests parse it, and promtool checks it).
        200: answer(t.String({ description: "Text exposition format 0.0.4 (or OpenMetrics 1.0.0 on request)." }), false),
        ...COMMON_ERRORS,
      },
      detail: {
        summary: "Prometheus metrics",
        description: "Every metric of the catalogue under `<prometheus_namespace>_`, each with HELP and TYPE lines.",
        tags: ["metrics"],
        responses: {
          200: {
            description: "Metrics",
            content: {
              "text/plain; version=0.0.4; charset=utf-8": { schema: { type: "string" } },
              "application/openmetrics-text; version=1.0.0; charset=utf-8": { schema: { type: "string" } },
            },
          },
        },
      },
    },
  );
}
