/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header a request carried, read so that
 * its spans join the trace the caller started. Only the header's own rules are applied: a value that breaks them is
 * ignored (the span starts a trace of its own), as the recommendation asks of a receiver.
 */

/** OTLP SpanFlags (trace.proto): the W3C trace flags in bits 0-7, and whether the parent is remote in bits 8-9. */
export const SPAN_FLAGS_TRACE_FLAGS_MASK = 0xff;
export const SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE = 0x100;
export const SPAN_FLAGS_CONTEXT_IS_REMOTE = 0x200;

export interface TraceParent {
  /** 16 bytes, not all zero. */
  traceId: Uint8Array;
  /** The caller's span: 8 bytes, not all zero. */
  parentId: Uint8Array;
  /** The W3C trace flags (bit 0: sampled by the caller). */
  flags: number;
}

/** `version-traceid-parentid-flags`: 2 + 1 + 32 + 1 + 16 + 1 + 2 characters. */
const TRACEPARENT_CHARS = 55;

/** The value of lower-case hex digit `c`, or -1 (upper case is not allowed in traceparent). */
function hexDigit(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  return -1;
}

/** Bytes of the lower-case hex digits `s[from..from + 2n)` into a new array, or undefined when one is not such a digit. */
function hexBytes(s: string, from: number, n: number): Uint8Array | undefined {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) {
    const hi = hexDigit(s.charCodeAt(from + 2 * i));
    const lo = hexDigit(s.charCodeAt(from + 2 * i + 1));
    if (hi < 0 || lo < 0) return undefined;
    out[i] = (hi << 4) | lo;
  }
  return out;
}

const allZero = (b: Uint8Array) => b.every((x) => x === 0);

/**
 * The trace context of a `traceparent` header value (surrounding whitespace allowed), or undefined when it is not
 * one: a version other than two lower-case hex digits or "ff", a version-00 value of another length, a later
 * version's value longer than 55 characters without a "-" after them, fields not lower-case hex of their length,
 * or an all-zero trace id or parent id. An empty value (agent's mark for a header sent twice) is none either.
 */
export function parseTraceparent(value: string): TraceParent | undefined {
  const v = value.trim();
  if (v.length < TRACEPARENT_CHARS) return undefined;
  const version = hexBytes(v, 0, 1);
  if (version === undefined || version[0] === 0xff) return undefined;
  if (version[0] === 0 ? v.length !== TRACEPARENT_CHARS : v.length > TRACEPARENT_CHARS && v[TRACEPARENT_CHARS] !== "-") return undefined;
  if (v[2] !== "-" || v[35] !== "-" || v[52] !== "-") return undefined;
  const traceId = hexBytes(v, 3, 16);
  const parentId = hexBytes(v, 36, 8);
  const flags = hexBytes(v, 53, 1);
  if (traceId === undefined || parentId === undefined || flags === undefined || allZero(traceId) || allZero(parentId)) return undefined;
  return { traceId, parentId, flags: flags[0]! };
}

/**
 * The OTLP Span.flags of a span whose parent is `parent`: its W3C trace flags, and whether that parent is remote
 * (a server's caller in another process) or not (a client span's parent is the span the calling process made).
 */
export function spanFlagsOf(parent: TraceParent, remote: boolean): number {
  return (parent.flags & SPAN_FLAGS_TRACE_FLAGS_MASK) | SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE | (remote ? SPAN_FLAGS_CONTEXT_IS_REMOTE : 0);
}
