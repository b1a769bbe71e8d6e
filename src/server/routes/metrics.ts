/**
 * GET <self_telemetry.path>: Prometheus text exposition (or OpenMetrics when the Accept header asks),
 * gzip when Accept-Encoding allows.
 */
import { Elysia, t } from "elysia";
import type { ServerDeps } from "../deps";
import { answerResponse } from "../answer";
import { COMMON_ERRORS, responses, unchecked } from "../model";
import type { MediaOverride } from "./openapi";
import { OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE } from "../../telemetry/exposition";

const OPENMETRICS = "application/openmetrics-text";
const GZIP_MIN_BYTES = 1024;

export function metricsRoutes(deps: ServerDeps, path: string, prefix = "", check = true) {
  return new Elysia({ name: "routes/metrics", seed: `${prefix}:${check}`, prefix }).get(
    path,
    // The body is the text's UTF-8 bytes as the exposition writes them (a string of hundreds of pieces cost as much
    // to flatten into the body as to format), in a Response that takes over set.headers (see answerResponse: Elysia
    // passes it over as is). Elysia's handler type pairs the route's schema (the text) with plain bodies.
    async ({ request, set }) => {
      const openMetrics = (request.headers.get("accept") ?? "").includes(OPENMETRICS);
      const body = await deps.metrics.renderBytes(openMetrics);
      const contentType = openMetrics ? OPENMETRICS_CONTENT_TYPE : PROMETHEUS_CONTENT_TYPE;
      // Compression is transport: the 200 schema still documents the text.
      const gzip = body.length >= GZIP_MIN_BYTES && /\bgzip\b/.test(request.headers.get("accept-encoding") ?? "");
      return answerResponse(set, 200, gzip ? Bun.gzipSync(body) : body, contentType, gzip) as never as string;
    },
    {
      response: responses(check, {
        // Never checked: the handler answers the text as bytes (tests parse it, and promtool checks it).
        200: unchecked(t.String({ description: "Text exposition format 0.0.4 (or OpenMetrics 1.0.0 on request)." })),
        ...COMMON_ERRORS,
      }),
      detail: {
        summary: "Prometheus metrics",
        description: "Every metric of the catalogue under `<prometheus_namespace>_`, each with HELP and TYPE lines.",
        tags: ["metrics"],
        "x-media": {
          200: {
            [PROMETHEUS_CONTENT_TYPE]: { schema: { type: "string" } },
            [OPENMETRICS_CONTENT_TYPE]: { schema: { type: "string" } },
          },
        } satisfies MediaOverride,
      },
    },
  );
}
