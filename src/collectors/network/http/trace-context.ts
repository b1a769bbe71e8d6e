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
const DASH = 45;

/** Lower-case hex digits' values by character code; -1 for every other (upper case is not allowed in traceparent). */
const HEX = new Int8Array(128).fill(-1);
for (let c = 0; c < 10; c++) HEX[48 + c] = c;
for (let c = 0; c < 6; c++) HEX[97 + c] = 10 + c;

/** The value of the two lower-case hex digits at `s[at]`, or -1. */
function hexByte(s: string, at: number): number {
  const hi = s.charCodeAt(at);
  const lo = s.charCodeAt(at + 1);
  if (hi > 127 || lo > 127) return -1;
  const h = HEX[hi]!;
  const l = HEX[lo]!;
  return h < 0 || l < 0 ? -1 : (h << 4) | l;
}

/** Bytes of the lower-case hex digits `s[from..from + 2n)` into a new array, or undefined when one is not such a digit or all are zero. */
function idBytes(s: string, from: number, n: number): Uint8Array | undefined {
  const out = new Uint8Array(n);
  let any = 0;
  for (let i = 0; i < n; i++) {
    const b = hexByte(s, from + 2 * i);
    if (b < 0) return undefined;
    out[i] = b;
    any |= b;
  }
  return any === 0 ? undefined : out;
}

/**
 * The trace context of a `traceparent` header value (surrounding whitespace allowed), or undefined when it is not
 * one: a version other than two lower-case hex digits or "ff", a version-00 value of another length, a later
 * version's value longer than 55 characters without a "-" after them, fields not lower-case hex of their length,
 * or an all-zero trace id or parent id. An empty value (agent's mark for a header sent twice) is none either.
 */
export function parseTraceparent(value: string): TraceParent | undefined {
  const v = value.length === TRACEPARENT_CHARS ? value : value.trim();
  if (v.length < TRACEPARENT_CHARS) return undefined;
  const version = hexByte(v, 0);
  if (version < 0 || version === 0xff) return undefined;
  if (version === 0 ? v.length !== TRACEPARENT_CHARS : v.length > TRACEPARENT_CHARS && v.charCodeAt(TRACEPARENT_CHARS) !== DASH) return undefined;
  if (v.charCodeAt(2) !== DASH || v.charCodeAt(35) !== DASH || v.charCodeAt(52) !== DASH) return undefined;
  const flags = hexByte(v, 53);
  if (flags < 0) return undefined;
  const traceId = idBytes(v, 3, 16);
  if (traceId === undefined) return undefined;
  const parentId = idBytes(v, 36, 8);
  if (parentId === undefined) return undefined;
  return { traceId, parentId, flags };
}

/**
 * The OTLP Span.flags of a span whose parent is `parent`: its W3C trace flags, and whether that parent is remote
 * (a server's caller in another process) or not (a client span's parent is the span the calling process made).
 */
export function spanFlagsOf(parent: TraceParent, remote: boolean): number {
  return (parent.flags & SPAN_FLAGS_TRACE_FLAGS_MASK) | SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE | (remote ? SPAN_FLAGS_CONTEXT_IS_REMOTE : 0);
}
