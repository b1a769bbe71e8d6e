/**
 * What the debug profiles need to have watched before they are asked: the event loop (delay histogram and
 * blocks, with the operations that ran during each block), operations as they begin and end (for the execution
 * trace), and creation stacks of tasks. It is on only in debug mode (`setEnabled`), keyed by the agent's
 * TaskRegistry so the HTTP routes and the component that switches it share one.
 */
import { monitorEventLoopDelay } from "node:perf_hooks";

type IntervalHistogram = ReturnType<typeof monitorEventLoopDelay>;
import type { TaskInfo, TaskObserver, TaskOutcome, TaskRegistry, TaskWatch } from "../telemetry/tasks";

/** Period of the lag probe; a tick later than this by BLOCK_THRESHOLD_MS counts as a block. */
const LAG_TICK_MS = 20;
export const BLOCK_THRESHOLD_MS = 30;
/** Resolution of the event-loop delay histogram. */
const HISTOGRAM_RESOLUTION_MS = 10;
/** Blocks kept for the block profile (oldest dropped). */
const MAX_BLOCKS = 2000;
/** Events kept per execution trace (later ones are counted, not kept). */
export const MAX_TRACE_EVENTS = 200_000;

/** An operation as seen by the block profile. */
export interface OperationRef {
  name: string;
  stack: string | undefined;
}

/** One time the event loop was blocked past the threshold. */
export interface LoopBlock {
  atMs: number;
  delayMs: number;
  /** Operations live at some moment of the blocked window (empty: none was tracked). */
  operations: OperationRef[];
}

/** A Chrome trace-event (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU). */
export interface TraceEvent {
  name: string;
  cat: string;
  ph: "b" | "e" | "X" | "i" | "M";
  ts: number;
  pid: number;
  tid: number;
  id?: string;
  dur?: number;
  s?: "g" | "p" | "t";
  args?: Record<string, unknown>;
}

class TraceRecording {
  readonly events: TraceEvent[] = [];
  dropped = 0;
  readonly seen = new Set<number>();
  constructor(readonly originMs: number) {}
  push(e: TraceEvent): void {
    if (this.events.length < MAX_TRACE_EVENTS) this.events.push(e);
    else this.dropped++;
  }
  ts(ms: number): number {
    return Math.round((ms - this.originMs) * 1000);
  }
}

export class DebugRuntime implements TaskObserver {
  #enabled = false;
  #histogram: IntervalHistogram | undefined;
  #histogramSince = 0;
  #probe: ReturnType<typeof setInterval> | undefined;
  #lastTick = 0;
  #endedInWindow: OperationRef[] = [];
  readonly #blocks: LoopBlock[] = [];
  readonly #recordings = new Set<TraceRecording>();
  #traceBusyUntil: Date | undefined;
  /** The lag probe's clock (monotonic ms). */
  readonly #now: () => number;

  /** `now`: the lag probe's clock, performance.now unless a test moves it (a block is the clock moving while no timer runs). */
  constructor(
    readonly tasks: TaskRegistry,
    now: () => number = () => performance.now(),
  ) {
    this.#now = now;
  }

  get enabled(): boolean {
    return this.#enabled;
  }

  /** Turns watching on or off (debug mode). Idempotent. */
  setEnabled(on: boolean): void {
    if (on === this.#enabled) return;
    this.#enabled = on;
    this.tasks.captureStacks = on;
    if (on) {
      this.tasks.observers.add(this);
      this.#histogram = monitorEventLoopDelay({ resolution: HISTOGRAM_RESOLUTION_MS });
      this.#histogram.enable();
      this.#histogramSince = Date.now();
      this.#lastTick = this.#now();
      this.#probe = setInterval(() => this.#tick(), LAG_TICK_MS);
      this.#probe.unref?.();
    } else {
      this.tasks.observers.delete(this);
      this.#histogram?.disable();
      this.#histogram = undefined;
      if (this.#probe) clearInterval(this.#probe);
      this.#probe = undefined;
    }
  }

  began(info: TaskInfo): TaskWatch | undefined {
    const startedMs = performance.now();
    for (const r of this.#recordings) this.#traceBegin(r, info, startedMs, false);
    return {
      end: (outcome: TaskOutcome) => {
        if (info.kind === "operation") this.#endedInWindow.push({ name: info.name, stack: info.stack });
        const now = performance.now();
        for (const r of this.#recordings) {
          if (!r.seen.has(info.id)) continue;
          r.seen.delete(info.id);
          const args: Record<string, unknown> = { ...(outcome.attributes ?? {}) };
          if (outcome.error !== undefined) args.error = (outcome.error as Error)?.message ?? String(outcome.error);
          r.push({ name: info.name, cat: info.kind, ph: "e", ts: r.ts(now), pid: process.pid, tid: 1, id: String(info.id), args });
        }
      },
    };
  }

  /** Blocks seen since debug mode came on (at most MAX_BLOCKS, newest last). */
  blocks(): readonly LoopBlock[] {
    return this.#blocks;
  }

  /** The event-loop delay histogram since debug mode came on, in nanoseconds. */
  loopDelay(): { sinceMs: number; count: number; min: number; mean: number; p50: number; p99: number; max: number } | undefined {
    const h = this.#histogram;
    if (!h || h.count === 0) return undefined;
    return {
      sinceMs: this.#histogramSince,
      count: h.count,
      min: h.min,
      mean: h.mean,
      p50: h.percentile(50),
      p99: h.percentile(99),
      max: h.max,
    };
  }

  /** Records the agent's operations for `seconds` as Chrome trace events. One trace at a time (throws TraceBusyError). */
  async trace(seconds: number, signal?: AbortSignal): Promise<{ events: TraceEvent[]; dropped: number; startedMs: number }> {
    if (this.#traceBusyUntil) throw new TraceBusyError(this.#traceBusyUntil);
    const until = new Date(Date.now() + seconds * 1000);
    this.#traceBusyUntil = until;
    const startedMs = performance.now();
    const r = new TraceRecording(startedMs);
    r.push({ name: "process_name", cat: "__metadata", ph: "M", ts: 0, pid: process.pid, tid: 1, args: { name: "svc-agent" } });
    r.push({ name: "thread_name", cat: "__metadata", ph: "M", ts: 0, pid: process.pid, tid: 1, args: { name: "event loop" } });
    for (const t of this.tasks.list()) {
      r.seen.add(t.id);
      r.push({ name: t.name, cat: t.kind, ph: "b", ts: 0, pid: process.pid, tid: 1, id: String(t.id), args: { started_before_trace: true } });
    }
    this.#recordings.add(r);
    try {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, seconds * 1000);
        signal?.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
      });
    } finally {
      this.#recordings.delete(r);
      if (this.#traceBusyUntil === until) this.#traceBusyUntil = undefined;
    }
    const end = r.ts(performance.now());
    for (const t of this.tasks.list())
      if (r.seen.has(t.id)) r.push({ name: t.name, cat: t.kind, ph: "e", ts: end, pid: process.pid, tid: 1, id: String(t.id), args: { still_running: true } });
    return { events: r.events, dropped: r.dropped, startedMs };
  }

  #traceBegin(r: TraceRecording, info: TaskInfo, nowMs: number, before: boolean): void {
    r.seen.add(info.id);
    r.push({ name: info.name, cat: info.kind, ph: "b", ts: r.ts(nowMs), pid: process.pid, tid: 1, id: String(info.id), args: before ? { started_before_trace: true } : {} });
  }

  #tick(): void {
    const now = this.#now();
    const delayMs = now - this.#lastTick - LAG_TICK_MS;
    this.#lastTick = now;
    if (delayMs >= BLOCK_THRESHOLD_MS) {
      const live = this.tasks.list().filter((t) => t.kind === "operation").map((t) => ({ name: t.name, stack: t.stack }));
      const operations = [...live, ...this.#endedInWindow];
      this.#blocks.push({ atMs: Date.now(), delayMs, operations });
      if (this.#blocks.length > MAX_BLOCKS) this.#blocks.shift();
      for (const r of this.#recordings)
        r.push({ name: "event loop blocked", cat: "block", ph: "X", ts: r.ts(now - delayMs), dur: Math.round(delayMs * 1000), pid: process.pid, tid: 1, args: { operations: operations.map((o) => o.name) } });
    }
    this.#endedInWindow = [];
  }
}

/** An execution trace is already being recorded. */
export class TraceBusyError extends Error {
  constructor(readonly endsAt: Date) {
    super(`an execution trace is already being recorded (until ${endsAt.toISOString()}); only one at a time`);
    this.name = "TraceBusyError";
  }
}

const runtimes = new WeakMap<TaskRegistry, DebugRuntime>();
/** The debug runtime of the agent that owns `tasks` (created off on first use). */
export function debugRuntimeFor(tasks: TaskRegistry): DebugRuntime {
  let r = runtimes.get(tasks);
  if (!r) {
    r = new DebugRuntime(tasks);
    runtimes.set(tasks, r);
  }
  return r;
}
