/** Schema of the logging section (`svc:`, also accepted as `telegen:`). Owned by the logger. */
import { Type, type Static } from "@sinclair/typebox";

export const LOG_LEVELS = ["debug", "info", "warn", "error"] as const;
export const LOG_FORMATS = ["json", "text"] as const;

export const LogSectionSchema = Type.Object(
  {
    log_level: Type.Union(
      [Type.Literal("debug"), Type.Literal("info"), Type.Literal("warn"), Type.Literal("error")],
      { default: "info", description: "Lowest level written: debug, info, warn or error. Env: SVC_LOG_LEVEL." },
    ),
    log_format: Type.Union(
      [Type.Literal("json"), Type.Literal("text")],
      { default: "json", description: "json (one object per line) or text. Env: SVC_LOG_FORMAT." },
    ),
    recent_records: Type.Integer({
      minimum: 0,
      maximum: 100_000,
      default: 1000,
      description: "How many recent log records are kept in memory (GET /admin/logs, the diagnostics bundle), in every mode; at most 1 MiB in all whatever this says, a record over 4 KiB kept shortened.",
    }),
  },
  { additionalProperties: false, default: {} },
);
export type LogSectionConfig = Static<typeof LogSectionSchema>;
