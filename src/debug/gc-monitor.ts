/**
 * Garbage collections, measured: Bun's node:v8 GCProfiler reports every JavaScriptCore collection (eden
 * "Scavenge", full "MarkSweepCompact") with the heap size before and after. The monitor drains it periodically
 * and keeps cumulative figures for /debug/vars.
 *
 * TotalAlloc is derived, not counted by the runtime: JavaScriptCore keeps no cumulative allocation counter, so
 * it is the sum of the heap's growth between consecutive collections plus the growth since the last one. It
 * misses memory allocated outside the GC heap and is approximate where a collection runs concurrently with
 * allocation.
 */
import { heapSize } from "bun:jsc";
import v8 from "node:v8";

/** How often the profiler's records are drained (bounds its memory). */
const DRAIN_INTERVAL_MS = 10_000;

interface GcRecord {
  gcType: string;
  /** Microseconds. */
  cost: number;
  beforeGC: { heapStatistics: { usedHeapSize: number } };
  afterGC: { heapStatistics: { usedHeapSize: number } };
}
interface GcProfilerLike {
  start(): void;
  stop(): { statistics: GcRecord[] } | undefined;
}

export interface GcFigures {
  numGC: number;
  numEdenGC: number;
  numFullGC: number;
  pauseTotalNs: number;
  lastGcUnixNs: number;
  totalAlloc: number;
}

export class GcMonitor {
  #profiler: GcProfilerLike | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;
  #lastAfter = 0;
  #lastGcMs = 0;
  readonly figures: GcFigures = { numGC: 0, numEdenGC: 0, numFullGC: 0, pauseTotalNs: 0, lastGcUnixNs: 0, totalAlloc: 0 };
  /** Whether the runtime offers the GC profiler (false: figures stay 0 and /debug/vars says so). */
  readonly available: boolean;

  constructor() {
    const Ctor = (v8 as unknown as { GCProfiler?: new () => GcProfilerLike }).GCProfiler;
    this.available = typeof Ctor === "function";
    if (!Ctor) return;
    this.#profiler = new Ctor();
    this.#lastAfter = heapSize();
    this.#profiler.start();
    this.#timer = setInterval(() => this.drain(), DRAIN_INTERVAL_MS);
    this.#timer.unref?.();
  }

  /** Folds the collections since the last drain into the figures; returns them with the live heap growth added. */
  drain(): GcFigures {
    const p = this.#profiler;
    if (!p) return { ...this.figures };
    const records = p.stop()?.statistics ?? [];
    p.start();
    const f = this.figures;
    for (const r of records) {
      f.numGC++;
      if (r.gcType === "Scavenge") f.numEdenGC++;
      else f.numFullGC++;
      f.pauseTotalNs += Math.round(r.cost * 1000);
      f.totalAlloc += Math.max(0, r.beforeGC.heapStatistics.usedHeapSize - this.#lastAfter);
      this.#lastAfter = r.afterGC.heapStatistics.usedHeapSize;
      this.#lastGcMs = Date.now();
    }
    if (records.length > 0) f.lastGcUnixNs = this.#lastGcMs * 1_000_000;
    // heapSize(), not v8.getHeapStatistics(): the same figure, but the latter walks the heap (~130 ms at 1M objects).
    const growth = Math.max(0, heapSize() - this.#lastAfter);
    return { ...f, totalAlloc: f.totalAlloc + growth };
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#profiler?.stop();
    this.#profiler = undefined;
  }
}

let shared: GcMonitor | undefined;
/** The process' GC monitor, started on first use. */
export function gcMonitor(): GcMonitor {
  return (shared ??= new GcMonitor());
}
