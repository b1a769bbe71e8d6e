/**
 * What a log message says about itself: its severity and, where the format writes one, its time. Pure functions
 * over the message text (after the container runtime's CRI or Docker wrapping is removed).
 *
 * The message is read in the first of these shapes that fits, and only that shape is searched, so a word inside
 * the message body never overrides the level field of a structured line:
 *   1. JSON object (`{...}`): the first of the keys `level`, `severity`, `log.level` (flat or nested),
 *      `loglevel`, `lvl`, `levelname` (any case) gives the severity; a string value is read as a level word, a
 *      number as a pino/bunyan level (10 trace ... 60 fatal); a short word that is no known level is kept as the
 *      severity text alone. `time`, `timestamp`, `@timestamp`, `ts` give the time (RFC 3339 with a zone, or
 *      seconds/milliseconds/microseconds/nanoseconds since the epoch). `trace_id`/`traceId`/`trace.id` (32 hex
 *      digits), `span_id`/`spanId`/`span.id` (16) and `trace_flags` give the trace context.
 *   2. logfmt (the line starts with `key=value`): the keys `level`, `lvl`, `severity`, then `time`, `ts`,
 *      `timestamp`, and `trace_id`, `span_id`, `trace_flags`, the same way.
 *   3. Plain text: the first level token among the first 8 words (within the first 160 characters). An
 *      upper-case level word (`ERROR`, `WARN`...) counts wherever it stands among them; another spelling
 *      (`error`, `Warn`) only when it is bracketed (`[error]`, `<warn>`), followed by a colon (`error:`, as in
 *      Python's `ERROR:root:`), or preceded only by timestamp-like words (words with a digit, bracketed words,
 *      punctuation; at least one). A glog/klog prefix (`E0102 15:04:05.000000 ...`) counts as its letter. A leading RFC 3339
 *      time with a zone gives the time; times without a zone are not used.
 * Level words and their severity numbers follow the mappings of the OpenTelemetry log data model (syslog,
 * log4j, java.util.logging, zap, Python).
 */

/** Severity numbers of the OpenTelemetry log data model: TRACE 1, DEBUG 5, INFO 9, WARN 13, ERROR 17, FATAL 21. */
const LEVEL_WORDS: Record<string, number> = {
  trace: 1,
  finest: 1,
  finer: 5,
  debug: 5,
  dbg: 5,
  fine: 6,
  info: 9,
  inf: 9,
  information: 9,
  informational: 9,
  notice: 10,
  warn: 13,
  warning: 13,
  wrn: 13,
  error: 17,
  err: 17,
  severe: 17,
  dpanic: 18,
  critical: 18,
  crit: 18,
  alert: 19,
  panic: 19,
  fatal: 21,
  emerg: 21,
  emergency: 21,
};

/** pino/bunyan numeric levels. */
const NUMERIC_LEVELS: Record<number, number> = { 10: 1, 20: 5, 30: 9, 40: 13, 50: 17, 60: 21 };

/** JSON keys that carry the level, most specific first (compared in lower case). */
const JSON_LEVEL_KEYS = ["level", "severity", "log.level", "loglevel", "lvl", "levelname"];
const JSON_TIME_KEYS = ["time", "timestamp", "@timestamp", "ts"];
const LOGFMT_LEVEL_KEYS = ["level", "lvl", "severity"];
const LOGFMT_TIME_KEYS = ["time", "ts", "timestamp"];
/** Keys of the trace context (compared in lower case; logfmt takes the first of each list too). */
const TRACE_ID_KEYS = ["trace_id", "traceid", "trace.id", "oteltraceid"];
const SPAN_ID_KEYS = ["span_id", "spanid", "span.id", "otelspanid"];
const TRACE_FLAGS_KEYS = ["trace_flags", "traceflags", "oteltraceflags"];
const TRACE_ID_HEX = /^[0-9a-f]{32}$/i;
const SPAN_ID_HEX = /^[0-9a-f]{16}$/i;
const FLAGS_HEX = /^[0-9a-f]{1,2}$/i;
/** Longest level value kept as severity text when it is no known level word. */
const MAX_UNKNOWN_LEVEL_CHARS = 16;

const PLAIN_SCAN_CHARS = 160;
const PLAIN_SCAN_WORDS = 8;
const KLOG_PREFIX = /^([IWEF])\d{4}$/;
/** Cheap first test: a line with none of these has no level word (most plain lines are decided by it alone). */
const LEVEL_HINT = /trac|fine|deb|dbg|inf|noti|warn|wrn|err|sev|crit|aler|emerg|pani|fata|^[IWEF]\d{4}\s/i;
const HAS_DIGIT = /\d/;
const PUNCTUATION_ONLY = /^[^A-Za-z0-9]+$/;
const KLOG_LEVELS: Record<string, number> = { I: 9, W: 13, E: 17, F: 21 };
const OPENERS = "[(<{\"'";
const CLOSERS = "])>}\"',;|";
const LOGFMT_START = /^[A-Za-z_][\w.\-]*=/;
const ISO_TIME = /^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})$/i;
const LEADING_ISO_TIME = /^\[?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2}))(?=[\s\]]|$)/i;
const NS_PER_MS = 1_000_000n;

export interface MessageFields {
  /** 1..24; undefined when the message names no level. */
  severityNumber?: number;
  /** The level as the message wrote it. */
  severityText?: string;
  /** The time the message carries, ns since the epoch. */
  timeUnixNano?: bigint;
  /** Trace context written by an instrumented logger (16 and 8 bytes, W3C trace flags). */
  traceId?: Uint8Array;
  spanId?: Uint8Array;
  traceFlags?: number;
}

/** Severity and time of a message, read as its shape allows (see the file comment). */
export function readMessage(message: string): MessageFields {
  const first = message.charCodeAt(0);
  if (first === 0x7b /* { */ && message.charCodeAt(message.length - 1) === 0x7d /* } */) {
    const fromJson = readJson(message);
    if (fromJson) return fromJson;
  }
  if (LOGFMT_START.test(message)) return readLogfmt(message);
  return readPlain(message);
}

/** The severity number of a level word or pino number; undefined when it is not one. */
export function severityOfLevel(value: unknown): number | undefined {
  if (typeof value === "number") return NUMERIC_LEVELS[value];
  if (typeof value !== "string") return undefined;
  const n = LEVEL_WORDS[value.toLowerCase()];
  if (n !== undefined) return n;
  return /^\d+$/.test(value) ? NUMERIC_LEVELS[Number(value)] : undefined;
}

/**
 * An RFC 3339 / ISO 8601 time with a zone (`T` or a space between date and time, `.` or `,` before the
 * fraction, `Z`, `+hh:mm` or `+hhmm`), or a number of seconds, milliseconds, microseconds or nanoseconds since the
 * epoch (told apart by magnitude), in ns since the epoch; undefined when it is neither.
 */
export function parseTimeValue(value: unknown): bigint | undefined {
  if (typeof value === "number") {
    if (!Number.isFinite(value) || value <= 0) return undefined;
    if (value < 1e11) return BigInt(Math.round(value * 1e6)) * 1000n;
    if (value < 1e14) return BigInt(Math.round(value * 1e3)) * 1000n;
    if (value < 1e17) return BigInt(Math.round(value)) * 1000n;
    return BigInt(Math.round(value));
  }
  if (typeof value !== "string") return undefined;
  const m = ISO_TIME.exec(value);
  if (!m) return /^\d+(\.\d+)?$/.test(value) ? parseTimeValue(Number(value)) : undefined;
  let zone = m[4]!.toUpperCase();
  if (zone !== "Z" && zone.length === 5) zone = `${zone.slice(0, 3)}:${zone.slice(3)}`;
  const ms = Date.parse(`${m[1]}T${m[2]}${zone}`);
  if (Number.isNaN(ms)) return undefined;
  return BigInt(ms) * NS_PER_MS + BigInt((m[3] ?? "").padEnd(9, "0"));
}

function readJson(message: string): MessageFields | undefined {
  let obj: unknown;
  try {
    obj = JSON.parse(message);
  } catch {
    return undefined;
  }
  if (typeof obj !== "object" || obj === null || Array.isArray(obj)) return undefined;
  const byLowerKey = new Map<string, unknown>();
  for (const [k, v] of Object.entries(obj)) {
    const key = k.toLowerCase();
    if (!byLowerKey.has(key)) byLowerKey.set(key, v);
  }
  const nestedLog = byLowerKey.get("log");
  if (typeof nestedLog === "object" && nestedLog !== null && !byLowerKey.has("log.level"))
    byLowerKey.set("log.level", (nestedLog as Record<string, unknown>).level);
  return structuredFields((k) => byLowerKey.get(k), JSON_LEVEL_KEYS, JSON_TIME_KEYS);
}

/** Level, time and trace context of a structured line whose fields `get` returns by lower-case key. */
function structuredFields(get: (key: string) => unknown, levelKeys: readonly string[], timeKeys: readonly string[]): MessageFields {
  const out: MessageFields = {};
  const level = levelKeys.map(get).find((v) => v !== undefined);
  if (level !== undefined) setLevel(out, level);
  for (const key of timeKeys) {
    const t = parseTimeValue(get(key));
    if (t !== undefined) {
      out.timeUnixNano = t;
      break;
    }
  }
  setTraceContext(out, (keys) => keys.map(get).find((v) => v !== undefined));
  return out;
}

/** Severity number and text from a level field's value (text alone for a short unknown word). */
function setLevel(out: MessageFields, v: unknown): void {
  const n = severityOfLevel(v);
  if (n !== undefined) {
    out.severityNumber = n;
    out.severityText = String(v);
  } else if (typeof v === "string" && v.length > 0 && v.length <= MAX_UNKNOWN_LEVEL_CHARS && /^[\w.+-]+$/.test(v)) out.severityText = v;
}

/** Trace id, span id and flags from the first present key of each list (ids only when valid and not zero). */
function setTraceContext(out: MessageFields, first: (keys: string[]) => unknown): void {
  const trace = first(TRACE_ID_KEYS);
  if (typeof trace !== "string" || !TRACE_ID_HEX.test(trace) || /^0+$/.test(trace)) return;
  out.traceId = Buffer.from(trace, "hex");
  const span = first(SPAN_ID_KEYS);
  if (typeof span === "string" && SPAN_ID_HEX.test(span) && !/^0+$/.test(span)) out.spanId = Buffer.from(span, "hex");
  const flags = first(TRACE_FLAGS_KEYS);
  if (typeof flags === "number" && Number.isInteger(flags) && flags >= 0 && flags <= 0xff) out.traceFlags = flags;
  else if (typeof flags === "string" && FLAGS_HEX.test(flags)) out.traceFlags = Number.parseInt(flags, 16);
}

/** logfmt pairs of a line: `key=value` or `key="quoted \" value"`, separated by spaces. */
export function logfmtPairs(line: string): Map<string, string> {
  const out = new Map<string, string>();
  let i = 0;
  const n = line.length;
  while (i < n) {
    while (i < n && line.charCodeAt(i) === 0x20) i++;
    const keyStart = i;
    while (i < n && line[i] !== "=" && line.charCodeAt(i) !== 0x20) i++;
    const key = line.slice(keyStart, i);
    if (line[i] !== "=") continue;
    i++;
    let value = "";
    if (line[i] === '"') {
      i++;
      while (i < n && line[i] !== '"') {
        if (line[i] === "\\" && i + 1 < n) i++;
        value += line[i];
        i++;
      }
      i++;
    } else {
      const valueStart = i;
      while (i < n && line.charCodeAt(i) !== 0x20) i++;
      value = line.slice(valueStart, i);
    }
    const lower = key.toLowerCase();
    if (key && !out.has(lower)) out.set(lower, value);
  }
  return out;
}

function readLogfmt(message: string): MessageFields {
  const pairs = logfmtPairs(message);
  return structuredFields((k) => pairs.get(k), LOGFMT_LEVEL_KEYS, LOGFMT_TIME_KEYS);
}

function readPlain(message: string): MessageFields {
  const out: MessageFields = {};
  const head = message.length > PLAIN_SCAN_CHARS ? message.slice(0, PLAIN_SCAN_CHARS) : message;
  const c0 = head.charCodeAt(0);
  const iso = (c0 >= 0x30 && c0 <= 0x39) || c0 === 0x5b /* [ */ ? LEADING_ISO_TIME.exec(head) : null;
  if (iso) {
    const t = parseTimeValue(iso[1]);
    if (t !== undefined) out.timeUnixNano = t;
  }
  if (!LEVEL_HINT.test(head)) return out;
  const words = head.split(/\s+/, PLAIN_SCAN_WORDS + 1).filter((w) => w.length > 0);
  let onlyPrefixBefore = true;
  for (let i = 0; i < Math.min(words.length, PLAIN_SCAN_WORDS); i++) {
    const word = words[i]!;
    if (i === 0) {
      const k = KLOG_PREFIX.exec(word);
      if (k) return { ...out, severityNumber: KLOG_LEVELS[k[1]!]!, severityText: k[1]! };
    }
    let s = 0;
    while (s < word.length && OPENERS.includes(word[s]!)) s++;
    const bracketed = s > 0;
    let core = word.slice(s);
    const colon = core.indexOf(":");
    const colonAfter = colon > 0;
    if (colon >= 0) core = core.slice(0, colon);
    let e = core.length;
    while (e > 0 && CLOSERS.includes(core[e - 1]!)) e--;
    core = core.slice(0, e);
    const n = core.length > 1 ? LEVEL_WORDS[core.toLowerCase()] : undefined;
    if (n !== undefined && (core === core.toUpperCase() || bracketed || colonAfter || (onlyPrefixBefore && i > 0)))
      return { ...out, severityNumber: n, severityText: core };
    if (!(bracketed || HAS_DIGIT.test(word) || PUNCTUATION_ONLY.test(word))) onlyPrefixBefore = false;
  }
  return out;
}
