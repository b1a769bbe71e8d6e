/**
 * Structured logging to stderr: JSON records `{timestamp, level, msg, ...context}` or readable text,
 * filtered by level, with a bounded ring of recent records for the diagnostics bundle.
 * Registered secrets (the bearer token, exporter header values) are scrubbed from every record.
 */
import type { LogSectionConfig } from "./config";

export type LogLevel = "debug" | "info" | "warn" | "error";
export type LogFormat = "json" | "text";
export type LogContext = Record<string, unknown>;

const LEVEL_RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };
const REDACTED = "[REDACTED]";

/** One record as written (after scrubbing). */
export interface LogRecord {
  timestamp: string;
  level: LogLevel;
  msg: string;
  [key: string]: unknown;
}

/** Where records are written; stderr by default, replaceable in tests. */
export type LogSink = (line: string) => void;

const stderrSink: LogSink = (line) => {
  process.stderr.write(line + "\n");
};

/** Shared state of a logger and all its children: level, format, ring and secrets change together on reload. */
class LogCore {
  level: LogLevel = "info";
  format: LogFormat = "json";
  ring: LogRecord[] = [];
  ringCapacity = 1000;
  ringNext = 0;
  secrets: string[] = [];
  constructor(public sink: LogSink) {}

  push(record: LogRecord): void {
    if (this.ringCapacity === 0) return;
    if (this.ring.length < this.ringCapacity) this.ring.push(record);
    else this.ring[this.ringNext] = record;
    this.ringNext = (this.ringNext + 1) % this.ringCapacity;
  }
}

export class Logger {
  readonly #core: LogCore;
  readonly #context: LogContext;

  constructor(options: { sink?: LogSink; level?: LogLevel; format?: LogFormat } = {}, core?: LogCore, context: LogContext = {}) {
    this.#core = core ?? new LogCore(options.sink ?? stderrSink);
    if (!core) {
      if (options.level) this.#core.level = options.level;
      if (options.format) this.#core.format = options.format;
    }
    this.#context = context;
  }

  /** A logger that adds `context` to every record; shares level, format, ring and secrets with this one. */
  child(context: LogContext): Logger {
    return new Logger({}, this.#core, { ...this.#context, ...context });
  }

  /** Applies the logging section of a (re)loaded configuration; takes effect on the next record. */
  configure(c: Pick<LogSectionConfig, "log_level" | "log_format"> & Partial<Pick<LogSectionConfig, "recent_records">>): void {
    this.#core.level = c.log_level;
    this.#core.format = c.log_format;
    if (c.recent_records !== undefined && c.recent_records !== this.#core.ringCapacity) {
      const kept = this.recent().slice(-c.recent_records);
      this.#core.ringCapacity = c.recent_records;
      this.#core.ring = kept;
      this.#core.ringNext = kept.length % Math.max(1, c.recent_records);
    }
  }

  /** Replaces the set of strings never to be written (tokens, header values). Empty strings are ignored. */
  setSecrets(secrets: string[]): void {
    this.#core.secrets = [...new Set(secrets.filter((s) => s.length > 0))].sort((a, b) => b.length - a.length);
  }

  get level(): LogLevel {
    return this.#core.level;
  }

  enabled(level: LogLevel): boolean {
    return LEVEL_RANK[level] >= LEVEL_RANK[this.#core.level];
  }

  debug(msg: string, context?: LogContext): void {
    this.write("debug", msg, context);
  }
  info(msg: string, context?: LogContext): void {
    this.write("info", msg, context);
  }
  warn(msg: string, context?: LogContext): void {
    this.write("warn", msg, context);
  }
  error(msg: string, context?: LogContext): void {
    this.write("error", msg, context);
  }

  /** The recent records, oldest first (bounded by `svc.recent_records`). */
  recent(): LogRecord[] {
    const c = this.#core;
    if (c.ring.length < c.ringCapacity) return [...c.ring];
    return [...c.ring.slice(c.ringNext), ...c.ring.slice(0, c.ringNext)];
  }

  write(level: LogLevel, msg: string, context?: LogContext): void {
    if (!this.enabled(level)) return;
    const record: LogRecord = { timestamp: new Date().toISOString(), level, msg, ...this.#context };
    if (context) for (const [k, v] of Object.entries(context)) record[k] = v instanceof Error ? v.message : v;
    const json = this.#scrub(JSON.stringify(record));
    const clean = this.#core.secrets.length > 0 ? (JSON.parse(json) as LogRecord) : record;
    this.#core.push(clean);
    this.#core.sink(this.#core.format === "json" ? json : formatText(clean));
  }

  #scrub(text: string): string {
    let out = text;
    for (const s of this.#core.secrets) {
      if (out.includes(s)) out = out.replaceAll(s, REDACTED);
      const escaped = JSON.stringify(s).slice(1, -1);
      if (escaped !== s && out.includes(escaped)) out = out.replaceAll(escaped, REDACTED);
    }
    return out;
  }
}

function formatText(r: LogRecord): string {
  const { timestamp, level, msg, ...rest } = r;
  const fields = Object.entries(rest)
    .map(([k, v]) => `${k}=${typeof v === "string" && !/[\s"=]/.test(v) ? v : JSON.stringify(v)}`)
    .join(" ");
  return `${timestamp} ${level.toUpperCase().padEnd(5)} ${msg}${fields ? " " + fields : ""}`;
}
