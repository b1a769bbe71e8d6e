/**
 * /debug/vars: the process arguments, runtime memory figures under Go's expvar names, and the agent's own
 * counters. Every figure is measured; `memstats_notes` says what each memstats figure is under this runtime.
 */
import { heapSize, heapStats } from "bun:jsc";
import type { ServerDeps } from "../deps";
import { gcMonitor } from "../../debug/gc-monitor";
import { debugRuntimeFor } from "../../debug/runtime";

export const MEMSTATS_NOTES = {
  Alloc: "bytes of JavaScript heap in use now (JavaScriptCore heap size)",
  TotalAlloc:
    "cumulative bytes allocated on the JavaScript heap since the agent started, derived from measured heap sizes: the heap's growth between consecutive collections plus its growth since the last one (JavaScriptCore keeps no allocation counter; memory outside the GC heap is not included)",
  Sys: "resident set size of the process (bytes)",
  NumGC: "garbage collections since the agent started (eden + full), each reported by the runtime's GC profiler",
  NumEdenGC: "eden (young generation) collections",
  NumFullGC: "full collections",
  PauseTotalNs: "total time of the collections as reported by the runtime's GC profiler",
  LastGC: "Unix time of the last collection, nanoseconds (0: none yet)",
  HeapAlloc: "JavaScriptCore heap size in bytes (heapStats().heapSize)",
  HeapSys: "JavaScriptCore heap capacity in bytes",
  HeapObjects: "live JavaScript objects (heapStats().objectCount)",
  ExternalAlloc: "bytes held outside the GC heap by GC objects (buffers, external strings)",
  ArrayBuffers: "bytes of ArrayBuffers and Buffers",
  Mallocs: "not measured: JavaScriptCore exposes no allocation counter (always 0)",
} as const;

export async function debugVars(deps: Pick<ServerDeps, "tasks" | "status" | "metrics">) {
  const heap = heapStats();
  const mem = process.memoryUsage();
  const gc = gcMonitor();
  const f = gc.drain();
  const loop = debugRuntimeFor(deps.tasks).loopDelay();
  return {
    cmdline: commandLine(),
    memstats: {
      Alloc: Math.round(heapSize()),
      TotalAlloc: Math.round(f.totalAlloc),
      Sys: Math.round(mem.rss),
      NumGC: f.numGC,
      NumEdenGC: f.numEdenGC,
      NumFullGC: f.numFullGC,
      PauseTotalNs: f.pauseTotalNs,
      LastGC: f.lastGcUnixNs,
      HeapAlloc: Math.round(heap.heapSize),
      HeapSys: Math.round(heap.heapCapacity),
      HeapObjects: heap.objectCount,
      ExternalAlloc: Math.round(heap.extraMemorySize),
      ArrayBuffers: Math.round(mem.arrayBuffers),
      Mallocs: 0,
    },
    memstats_notes: gc.available ? MEMSTATS_NOTES : { ...MEMSTATS_NOTES, NumGC: "not measured: this runtime has no GC profiler (always 0)" },
    goroutines: deps.tasks.count(),
    event_loop_delay_ms: loop ? { p50: loop.p50 / 1e6, p99: loop.p99 / 1e6, max: loop.max / 1e6 } : null,
    components: Object.fromEntries(deps.status.components().map((c) => [c.id, c.state])),
    counters: await agentCounters(deps.metrics),
  };
}

/** The agent's own counters and gauges (label sets summed), read from its metric registry. */
async function agentCounters(metrics: ServerDeps["metrics"]): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const m of await metrics.registry.getMetricsAsJSON()) {
    const type = String(m.type);
    if (type !== "counter" && type !== "gauge") continue;
    out[m.name] = m.values.reduce((s, v) => s + (Number.isFinite(v.value) ? v.value : 0), 0);
  }
  return out;
}

/**
 * The process arguments as the operator typed them (Go's os.Args): the executable, then its arguments.
 * A compiled Bun binary reports argv as ["bun", "/$bunfs/root/<name>", ...args]; from source, [bun, script, ...args].
 */
export function commandLine(): string[] {
  return [process.execPath, ...process.argv.slice(2)];
}
