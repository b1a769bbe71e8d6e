/**
 * Self-tracing: the agent's operations (every TaskRegistry operation: HTTP requests, reloads, flushes, export
 * batches, discovery refreshes, eBPF loads...) become spans of service `svc-agent`, submitted to the agent's own
 * pipeline as `traces`. Requests to the HTTP interface are SERVER spans named and attributed per the HTTP semantic
 * conventions (`{method} {http.route}`, or `{method}` for a path no route serves; `http.request.method`,
 * `url.path`, `url.scheme`, `http.route`, `http.response.status_code`, `error.type`); other operations are
 * INTERNAL spans named by the operation. Parent-child structure follows the async context (AsyncLocalStorage): an operation run
 * with `tasks.track` or `startActive` is the parent of the operations started inside it. Sampling is
 * deterministic by trace id (like OpenTelemetry's TraceIdRatioBased) and decided at the root; children follow.
 */
import type { Config } from "../config/schema";
import type { SpanItem } from "../export/model";
import type { TelemetryPipeline } from "../export/types";
import { SUPPRESSED, UNSAMPLED, spanContext as context, type ActiveSpan } from "../telemetry/span-context";
import type { TaskInfo, TaskObserver, TaskOutcome, TaskRegistry, TaskWatch } from "../telemetry/tasks";

export { activeSpan, setSpanAttributes, suppressTracing, type ActiveSpan } from "../telemetry/span-context";

export const TRACER_SCOPE = { name: "svc-agent/self-tracing" } as const;
/** SpanKind values (OTLP). */
const KIND_INTERNAL = 1;
const KIND_SERVER = 2;
const STATUS_ERROR = 2;
/** HTTP methods the semantic conventions know; others are `_OTHER`. */
const KNOWN_METHODS = new Set(["CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "QUERY", "TRACE"]);
/** Routes of the agent's HTTP interface with a path parameter (src/server/routes); every other path served is its own route. */
const PARAMETER_ROUTES: ReadonlyArray<[RegExp, string]> = [[/^\/debug\/pprof\/[^/]+$/, "/debug/pprof/{profile}"]];

/** The route template of a path the agent's HTTP interface served. */
function routeOf(path: string): string {
  for (const [re, route] of PARAMETER_ROUTES) if (re.test(path)) return route;
  return path;
}

/** W3C trace flag "sampled". */
const FLAG_SAMPLED = 1;
/** Bits of the trace id compared against the sample rate. */
const RATIO_BITS = 56;

/** Runs `fn` as a traced operation named `name` (a tracked operation of `tasks`). */
export function startActive<T>(tasks: TaskRegistry, name: string, fn: () => Promise<T>): Promise<T> {
  return tasks.track(name, fn, "operation");
}

/** Whether a trace id falls in the sampled fraction: its low 56 bits, as a fraction of 2^56, below `rate`. */
export function sampledByTraceId(traceId: Uint8Array, rate: number): boolean {
  if (rate >= 1) return true;
  if (rate <= 0) return false;
  let x = 0;
  for (let i = traceId.length - RATIO_BITS / 8; i < traceId.length; i++) x = x * 256 + traceId[i]!;
  return x / 2 ** RATIO_BITS < rate;
}

/**
 * A random non-zero id. Ids need to be unique, not secret: Math.random (JavaScriptCore's xorshift128+) is used
 * because the crypto generator cost microseconds per operation (bench/debug-overhead.ts).
 */
function randomId(bytes: number): Uint8Array {
  const b = new Uint8Array(bytes);
  const v = new DataView(b.buffer);
  for (let i = 0; i < bytes; i += 4) v.setUint32(i, (Math.random() * 0x1_0000_0000) >>> 0);
  if (b.every((x) => x === 0)) b[bytes - 1] = 1;
  return b;
}

const NOOP = () => undefined;

export interface TracerDeps {
  config(): Config;
  pipeline: Pick<TelemetryPipeline, "submit">;
}

export class Tracer implements TaskObserver {
  /** Spans started and submitted since start (for tests and /debug/vars). */
  started = 0;
  submitted = 0;

  constructor(readonly deps: TracerDeps) {}

  began(info: TaskInfo, scoped: boolean): TaskWatch | undefined {
    if (info.kind !== "operation") return undefined;
    const c = this.deps.config().self_telemetry.tracing;
    if (!c.enabled) return undefined;
    const store = context.getStore();
    if (store === SUPPRESSED) return undefined;
    // An unscoped unit (begin/end, e.g. an HTTP request) is a root: the context it was called from may be one
    // captured long ago (a listener created during a reload), not its cause.
    const parent = scoped ? store : undefined;
    this.started++;
    // Inside a trace that was not sampled: nothing to record, and the context already says so.
    if (parent && !parent.sampled) return undefined;
    const traceId = parent?.traceId ?? randomId(16);
    if (!parent && !sampledByTraceId(traceId, c.sample_rate)) {
      if (!scoped) context.enterWith(UNSAMPLED);
      return scoped ? { end: NOOP, run: (fn) => context.run(UNSAMPLED, fn) } : undefined;
    }
    const span: ActiveSpan = { traceId, spanId: randomId(8), sampled: true, attributes: {} };
    const startNs = nowNs();
    // Unscoped: the rest of the caller's async flow (e.g. the request's handler) runs under this span.
    if (!scoped) context.enterWith(span);
    return {
      end: (outcome: TaskOutcome) => {
        const item = this.#item(info, span, parent, startNs, nowNs(), outcome);
        this.submitted++;
        this.deps.pipeline.submit("traces", [item]);
      },
      run: (fn) => context.run(span, fn),
    };
  }

  #item(info: TaskInfo, span: ActiveSpan, parent: ActiveSpan | undefined, start: bigint, end: bigint, outcome: TaskOutcome): SpanItem {
    const http = /^http (\S+) (\S+)$/.exec(info.name);
    const attributes: Record<string, string | number | boolean> = { "svc.operation": info.name };
    Object.assign(attributes, span.attributes, outcome.attributes ?? {});
    const status = attributes["http.response.status_code"];
    const serverError = typeof status === "number" && status >= 500;
    const failed = outcome.error !== undefined || serverError;
    let name = info.name;
    if (http) {
      const method = KNOWN_METHODS.has(http[1]!) ? http[1]! : "_OTHER";
      const route = status === 404 ? undefined : routeOf(http[2]!);
      attributes["http.request.method"] = method;
      if (method === "_OTHER") attributes["http.request.method_original"] = http[1]!;
      attributes["url.path"] = http[2]!;
      attributes["url.scheme"] = "http";
      if (route !== undefined) attributes["http.route"] = route;
      const shown = method === "_OTHER" ? "HTTP" : method;
      name = route !== undefined ? `${shown} ${route}` : shown;
    }
    if (failed && attributes["error.type"] === undefined) {
      attributes["error.type"] = outcome.error !== undefined ? ((outcome.error as Error)?.name ?? "_OTHER") : String(status);
    }
    const item: SpanItem = {
      traceId: span.traceId,
      spanId: span.spanId,
      flags: FLAG_SAMPLED,
      name,
      kind: http ? KIND_SERVER : KIND_INTERNAL,
      startTimeUnixNano: start,
      endTimeUnixNano: end < start ? start : end,
      attributes,
      scope: TRACER_SCOPE,
    };
    if (parent) item.parentSpanId = parent.spanId;
    if (failed) item.status = { code: STATUS_ERROR, message: outcome.error !== undefined ? String((outcome.error as Error)?.message ?? outcome.error) : "server error" };
    return item;
  }
}

function nowNs(): bigint {
  return BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n;
}
