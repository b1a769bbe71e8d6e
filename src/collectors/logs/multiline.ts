/**
 * Multiline records (stack traces): lines of one stream are joined into one record from a line that matches the
 * rule's start pattern up to the line before the next one. A record also ends when nothing new arrived for the
 * flush timeout (the tail engine asks), or is bounded by max_lines and max_bytes: lines beyond a bound are
 * dropped up to the next start line and the record says it was truncated. A line that does not match while no
 * record is in progress (the file starts mid-trace) begins a record of its own, so nothing is lost.
 */
import type { ParsedLine } from "./parse";

/** A rule as the engine uses it (compiled from `agent.logs.multiline[i]`). */
export interface MultilineRule {
  /** Index in `agent.logs.multiline` (for messages). */
  index: number;
  include: Bun.Glob[];
  start: RegExp;
  maxLines: number;
  maxBytes: number;
  flushTimeoutMs: number;
}

/** One complete line of a stream (CRI partials already joined). */
export interface LogicalLine {
  message: string;
  /** The parse of its first physical line (runtime time, stream). */
  parsed: ParsedLine;
  /** Offset of its first byte in the file. */
  start: number;
  /** Offset just after its newline. */
  end: number;
  /** Cut at max_line_size. */
  cut: boolean;
  /** When it was read, ns since the epoch (observed time). */
  readAtNs: bigint;
}

/** A finished record. */
export interface AssembledRecord {
  body: string;
  /** The record's first line (its time, severity and observed time come from it). */
  first: LogicalLine;
  /** Offset just after the record's last line (including dropped lines). */
  end: number;
  /** Lines in the record (kept ones). */
  lines: number;
  /** Some line of it was cut at max_line_size. */
  lineCut: boolean;
  /** Which bound dropped lines from it, if one did. */
  truncated: "max_lines" | "max_bytes" | undefined;
  /** The tailer generation its lines were read in. */
  generation: number;
}

interface InProgress {
  parts: string[];
  bytes: number;
  first: LogicalLine;
  end: number;
  lineCut: boolean;
  truncated: "max_lines" | "max_bytes" | undefined;
  lastAtMs: number;
  generation: number;
}

/** The first rule whose include patterns match `path`, or undefined. */
export function ruleFor(rules: readonly MultilineRule[], path: string): MultilineRule | undefined {
  return rules.find((r) => r.include.some((g) => g.match(path)));
}

/** Joins the lines of one stream of one file. Not shared between streams or files. */
export class MultilineAssembler {
  readonly #rule: MultilineRule;
  #current: InProgress | undefined;

  constructor(rule: MultilineRule) {
    this.#rule = rule;
  }

  /** Offset of the first byte of the record in progress (the checkpoint must not pass it), or undefined. */
  get startOffset(): number | undefined {
    return this.#current?.first.start;
  }

  /** Adds one line read at `nowMs` in tailer generation `generation`; returns the record it ends, if any. */
  push(line: LogicalLine, nowMs: number, generation: number): AssembledRecord | undefined {
    const c = this.#current;
    if (c && generation === c.generation && !this.#rule.start.test(line.message)) {
      c.lastAtMs = nowMs;
      c.end = line.end;
      if (c.truncated) return undefined;
      const bytes = Buffer.byteLength(line.message) + 1;
      if (c.parts.length >= this.#rule.maxLines) c.truncated = "max_lines";
      else if (c.bytes + bytes > this.#rule.maxBytes) c.truncated = "max_bytes";
      else {
        c.parts.push(line.message);
        c.bytes += bytes;
        if (line.cut) c.lineCut = true;
      }
      return undefined;
    }
    const done = this.flush();
    let message = line.message;
    let bytes = Buffer.byteLength(message);
    let truncated: InProgress["truncated"];
    if (bytes > this.#rule.maxBytes) {
      message = Buffer.from(message).subarray(0, this.#rule.maxBytes).toString("utf8");
      bytes = this.#rule.maxBytes;
      truncated = "max_bytes";
    }
    this.#current = { parts: [message], bytes, first: line, end: line.end, lineCut: line.cut, truncated, lastAtMs: nowMs, generation };
    return done;
  }

  /** The record in progress when no line came for the flush timeout by `nowMs`; it then ends. */
  flushIfIdle(nowMs: number): AssembledRecord | undefined {
    const c = this.#current;
    if (!c || nowMs - c.lastAtMs < this.#rule.flushTimeoutMs) return undefined;
    return this.flush();
  }

  /** Ends the record in progress now and returns it (undefined when there is none). */
  flush(): AssembledRecord | undefined {
    const c = this.#current;
    if (!c) return undefined;
    this.#current = undefined;
    return {
      body: c.parts.join("\n"),
      first: c.first,
      end: c.end,
      lines: c.parts.length,
      lineCut: c.lineCut,
      truncated: c.truncated,
      generation: c.generation,
    };
  }
}
