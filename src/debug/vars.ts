/** /debug/vars: the process arguments, runtime memory figures (Go expvar names), and the agent's own counters. */
import { heapStats } from "bun:jsc";
import type { ServerDeps } from "../server/deps";

/** Counts garbage collections by watching a sentinel get collected (JSC exposes no GC counter). */
let gcCount = 0;
const registry = new FinalizationRegistry<void>(() => {
  gcCount++;
  arm();
});
function arm(): void {
  registry.register({}, undefined);
}
arm();

let totalAlloc = 0;
let lastHeap = 0;

export function debugVars(deps: Pick<ServerDeps, "tasks" | "status">) {
  const heap = heapStats();
  const mem = process.memoryUsage();
  // TotalAlloc: cumulative bytes allocated, approximated from heap growth between samples (never decreases).
  const used = mem.heapUsed;
  if (used > lastHeap) totalAlloc += used - lastHeap;
  lastHeap = used;
  totalAlloc = Math.max(totalAlloc, used);
  return {
    cmdline: process.argv,
    memstats: {
      Alloc: Math.round(mem.heapUsed),
      TotalAlloc: Math.round(totalAlloc),
      Sys: Math.round(mem.rss),
      NumGC: gcCount,
      HeapAlloc: Math.round(heap.heapSize),
      HeapSys: Math.round(heap.heapCapacity),
      HeapObjects: heap.objectCount,
      ExternalAlloc: Math.round(heap.extraMemorySize),
      ArrayBuffers: Math.round(mem.arrayBuffers),
    },
    tasks: deps.tasks.count(),
    components: Object.fromEntries(deps.status.components().map((c) => [c.id, c.state])),
  };
}
