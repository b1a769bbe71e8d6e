/**
 * Container log line formats, as pure functions over one line of text (without its newline):
 *   - CRI (containerd, CRI-O): `<RFC 3339 time> <stdout|stderr> <P|F>[:tags] <message>`; `P` marks a partial
 *     line that continues in the next line of the same stream, `F` the last part.
 *   - Docker json-file: `{"log":"message\n","stream":"stdout","time":"<RFC 3339 time>"}`; a `log` without a
 *     trailing newline is a partial line (dockerd splits lines at 16 KiB).
 *   - raw: the line is the message.
 */

export type LineFormat = "auto" | "cri" | "docker" | "raw";

export interface ParsedLine {
  /** Time written by the runtime, nanoseconds since the epoch; undefined when the format carries none. */
  timeUnixNano: bigint | undefined;
  /** `stdout`, `stderr`, or undefined for raw lines. */
  stream: "stdout" | "stderr" | undefined;
  /** True when the message continues in a later line of the same stream. */
  partial: boolean;
  message: string;
  /** Which format the line was read as. */
  format: "cri" | "docker" | "raw";
}

const CRI_LINE = /^(\S+) (stdout|stderr) ([PF])(?::\S*)? ?/;
const RFC3339 = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/;
const NS_PER_MS = 1_000_000n;

/** Parses an RFC 3339 time with up to nanosecond digits into ns since the epoch; undefined when it is not one. */
export function parseRfc3339Nano(text: string): bigint | undefined {
  const m = RFC3339.exec(text);
  if (!m) return undefined;
  const ms = Date.parse(`${m[1]}${m[3]}`);
  if (Number.isNaN(ms)) return undefined;
  const frac = (m[2] ?? "").padEnd(9, "0");
  return BigInt(ms) * NS_PER_MS + BigInt(frac);
}

/** A CRI line, or undefined when the line is not one. */
export function parseCri(line: string): ParsedLine | undefined {
  const m = CRI_LINE.exec(line);
  if (!m) return undefined;
  const time = parseRfc3339Nano(m[1]!);
  if (time === undefined) return undefined;
  return {
    timeUnixNano: time,
    stream: m[2] as "stdout" | "stderr",
    partial: m[3] === "P",
    message: line.slice(m[0].length),
    format: "cri",
  };
}

/** A Docker json-file line, or undefined when the line is not one. */
export function parseDocker(line: string): ParsedLine | undefined {
  if (line.charCodeAt(0) !== 0x7b /* { */) return undefined;
  let obj: unknown;
  try {
    obj = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (typeof obj !== "object" || obj === null) return undefined;
  const { log, stream, time } = obj as { log?: unknown; stream?: unknown; time?: unknown };
  if (typeof log !== "string") return undefined;
  const partial = !log.endsWith("\n");
  return {
    timeUnixNano: typeof time === "string" ? parseRfc3339Nano(time) : undefined,
    stream: stream === "stderr" ? "stderr" : stream === "stdout" ? "stdout" : undefined,
    partial,
    message: partial ? log : log.slice(0, log.endsWith("\r\n") ? -2 : -1),
    format: "docker",
  };
}

function raw(line: string): ParsedLine {
  return { timeUnixNano: undefined, stream: undefined, partial: false, message: line, format: "raw" };
}

/**
 * Reads one line in `format`. A line that is not in the configured format is kept as a raw line (nothing is
 * dropped); `auto` tries CRI, then Docker JSON, then raw.
 */
export function parseLine(line: string, format: LineFormat): ParsedLine {
  switch (format) {
    case "cri":
      return parseCri(line) ?? raw(line);
    case "docker":
      return parseDocker(line) ?? raw(line);
    case "raw":
      return raw(line);
    case "auto":
      return (line.charCodeAt(0) === 0x7b ? parseDocker(line) : parseCri(line)) ?? raw(line);
  }
}
