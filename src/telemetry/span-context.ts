/**
 * The span current in an async context (AsyncLocalStorage), shared by the tracer (src/tracing), which sets it,
 * and the code that reads or suppresses it (the export pipeline suppresses it around sends of `traces`).
 */
import { AsyncLocalStorage } from "node:async_hooks";

/** The span that is current in an async context. */
export interface ActiveSpan {
  readonly traceId: Uint8Array;
  readonly spanId: Uint8Array;
  readonly sampled: boolean;
  /** Attributes set while the span runs (added to the exported span). */
  readonly attributes: Record<string, string | number | boolean>;
}

export const SUPPRESSED = Symbol("tracing suppressed");
export const spanContext = new AsyncLocalStorage<ActiveSpan | typeof SUPPRESSED>();

/** The span current in this async context, if any. */
export function activeSpan(): ActiveSpan | undefined {
  const s = spanContext.getStore();
  return s === SUPPRESSED || s === UNSAMPLED ? undefined : s;
}

/** Adds attributes to the current span (no-op without one). */
export function setSpanAttributes(attributes: Record<string, string | number | boolean>): void {
  const s = activeSpan();
  if (s) Object.assign(s.attributes, attributes);
}

/**
 * Runs `fn` with no spans produced inside it. The exporter of the `traces` signal wraps its sends in this, so
 * exporting self-spans does not itself produce spans forever.
 */
export function suppressTracing<T>(fn: () => T): T {
  return spanContext.run(SUPPRESSED, fn);
}

/** The context of an operation in a trace that was not sampled: its children are not sampled either. */
export const UNSAMPLED: ActiveSpan = Object.freeze({ traceId: new Uint8Array(16), spanId: new Uint8Array(8), sampled: false, attributes: Object.freeze({}) as Record<string, never> });
