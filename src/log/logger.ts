/**
 * Structured logging to stderr: JSON records `{timestamp, level, msg, ...context}` or readable text,
 * filtered by level, with a bounded ring of recent records for the diagnostics bundle.
 * Registered secrets (the bearer token, exporter header values) are scrubbed from every record.
 */
import { scrubText } from "./scrub";
import type { LogSectionConfig } from "./config";

export type LogLevel = "debug" | "info" | "warn" | "error";
export type LogFormat = "json" | "text";
export type LogContext = Record<string, unknown>;

const LEVEL_RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };
/**
 * Bytes the ring of recent records may hold in all, whatever svc.recent_records says: the oldest records leave
 * first. The ring keeps each record as its written (scrubbed) JSON line, one string, so this is what it costs.
 */
export const RECENT_MAX_BYTES = 1024 * 1024;
/** Longest record kept in the ring; a longer one is kept shortened (long values cut, `truncated: true`). */
export const RECENT_RECORD_MAX_BYTES = 4096;
/** Length a long string or array value is cut to in a shortened record. */
const SHORTENED_VALUE_CHARS = 512;

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

/**
 * The most recent records as JSON lines, oldest first, bounded by a count (svc.recent_records) and by
 * RECENT_MAX_BYTES. Holding lines, not record objects, keeps nothing a caller passed as context alive.
 */
class RecentRing {
  /** Lines from #head on are held; the dropped prefix is cut off once it is half the array. */
  #lines: string[] = [];
  #head = 0;
  #bytes = 0;
  constructor(readonly capacity: number) {}

  push(line: string): void {
    if (this.capacity === 0) return;
    while (this.size > 0 && (this.size >= this.capacity || this.#bytes + line.length > RECENT_MAX_BYTES)) this.#dropOldest();
    this.#lines.push(line);
    this.#bytes += line.length;
  }

  get size(): number {
    return this.#lines.length - this.#head;
  }

  /** The lines, oldest first. */
  lines(): string[] {
    return this.#lines.slice(this.#head);
  }

  /** Characters held (the ring's memory, less a small overhead per line). */
  get bytes(): number {
    return this.#bytes;
  }

  /** A ring of `capacity` holding the newest of this one's lines. */
  resized(capacity: number): RecentRing {
    const next = new RecentRing(capacity);
    if (capacity > 0) for (const line of this.lines().slice(-capacity)) next.push(line);
    return next;
  }

  #dropOldest(): void {
    this.#bytes -= this.#lines[this.#head]!.length;
    this.#head++;
    if (this.#head * 2 >= this.#lines.length) {
      this.#lines = this.#lines.slice(this.#head);
      this.#head = 0;
    }
  }
}

/** Shared state of a logger and all its children: level, format, ring and secrets change together on reload. */
class LogCore {
  level: LogLevel = "info";
  format: LogFormat = "json";
  ring = new RecentRing(1000);
  secrets: string[] = [];
  constructor(public sink: LogSink) {}
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
    if (c.recent_records !== undefined && c.recent_records !== this.#core.ring.capacity) this.#core.ring = this.#core.ring.resized(c.recent_records);
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

  /** The recent records, oldest first (bounded by `svc.recent_records` and RECENT_MAX_BYTES), secrets scrubbed. */
  recent(): LogRecord[] {
    return this.#core.ring.lines().map((l) => JSON.parse(l) as LogRecord);
  }

  /** Characters held by the ring of recent records. */
  get recentBytes(): number {
    return this.#core.ring.bytes;
  }

  write(level: LogLevel, msg: string, context?: LogContext): void {
    if (!this.enabled(level)) return;
    const record: LogRecord = { timestamp: new Date().toISOString(), level, msg, ...this.#context };
    if (context) for (const [k, v] of Object.entries(context)) record[k] = v instanceof Error ? v.message : v;
    const json = this.#scrub(JSON.stringify(record));
    this.#core.ring.push(json.length <= RECENT_RECORD_MAX_BYTES ? json : shortened(json));
    if (this.#core.format === "json") this.#core.sink(json);
    else this.#core.sink(formatText(this.#core.secrets.length > 0 ? (JSON.parse(json) as LogRecord) : record));
  }

  #scrub(text: string): string {
    return scrubText(text, this.#core.secrets);
  }

}

/**
 * A record too long for the ring, shortened from its scrubbed line (so a cut can never leave part of a secret):
 * long strings and arrays are cut with a note of what was left out, other long values replaced by their size.
 */
function shortened(json: string): string {
  const r = JSON.parse(json) as LogRecord;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r)) {
    const text = JSON.stringify(v) ?? "";
    if (text.length <= SHORTENED_VALUE_CHARS) out[k] = v;
    else if (typeof v === "string") out[k] = `${v.slice(0, SHORTENED_VALUE_CHARS)}... (${v.length - SHORTENED_VALUE_CHARS} more characters)`;
    else if (Array.isArray(v)) {
      const kept: unknown[] = [];
      let used = 0;
      for (const item of v) {
        used += (JSON.stringify(item) ?? "").length + 1;
        if (used > SHORTENED_VALUE_CHARS) break;
        kept.push(item);
      }
      out[k] = [...kept, `... (${v.length - kept.length} more items)`];
    } else out[k] = `(${text.length} characters left out)`;
  }
  out.truncated = true;
  const line = JSON.stringify(out);
  return line.length <= RECENT_RECORD_MAX_BYTES ? line : JSON.stringify({ timestamp: r.timestamp, level: r.level, msg: String(r.msg).slice(0, SHORTENED_VALUE_CHARS), truncated: true });
}

function formatText(r: LogRecord): string {
  const { timestamp, level, msg, ...rest } = r;
  const fields = Object.entries(rest)
    .map(([k, v]) => `${k}=${typeof v === "string" && !/[\s"=]/.test(v) ? v : JSON.stringify(v)}`)
    .join(" ");
  return `${timestamp} ${level.toUpperCase().padEnd(5)} ${msg}${fields ? " " + fields : ""}`;
}
