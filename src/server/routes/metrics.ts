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

export function metricsRoutes(deps: ServerDeps, path: string, prefix = "", check = true) {
  return new Elysia({ name: "routes/metrics", seed: `${prefix}:${check}`, prefix }).get(
    path,
    // The answer is built once by Elysia from `set.headers` (returning a Response would make Elysia copy it to
    // merge the interface's default headers: measured ~20% of a scrape).
    async ({ request, set }) => {
      const openMetrics = (request.headers.get("accept") ?? "").includes(OPENMETRICS);
      const text = await deps.metrics.render(openMetrics);
      set.headers["content-type"] = openMetrics ? OPENMETRICS_CONTENT_TYPE : PROMETHEUS_CONTENT_TYPE;
      if (text.length >= GZIP_MIN_BYTES && /\bgzip\b/.test(request.headers.get("accept-encoding") ?? "")) {
        // Binary: a Response of its own (the 200 schema documents the text; compression is transport).
        set.headers["content-encoding"] = "gzip";
        set.headers.vary = "Accept-Encoding";
        // Elysia's handler type pairs the route's schema with plain bodies; a Response passes through unchecked.
        return new Response(Bun.gzipSync(text), { headers: set.headers as Record<string, string> }) as never as string;
      }
      return text;
    },
    {
      response: {
        200: answer(t.String({ description: "Text exposition format 0.0.4 (or OpenMetrics 1.0.0 on request)." }), check),
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
