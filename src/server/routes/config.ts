/** GET /config: the running configuration with every secret replaced by one fixed text. */
import { Elysia } from "elysia";
import { redactConfig } from "../../config/secrets";
import { ConfigSchema } from "../../config/document";
import type { ServerDeps } from "../deps";
import { COMMON_ERRORS } from "../model";

export function configRoutes(deps: ServerDeps, prefix = "") {
  return new Elysia({ name: "routes/config", seed: prefix, prefix }).get("/config", () => redactConfig(deps.config()), {
    response: { 200: ConfigSchema, ...COMMON_ERRORS },
    detail: {
      summary: "Sanitized configuration",
      description: "The running configuration (defaults filled in). Tokens, passwords, keys and exporter header values read `[REDACTED]`.",
      tags: ["config"],
    },
  });
}
