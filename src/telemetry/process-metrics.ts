/**
 * Cheap process collectors. CPU time (getrusage) and resident memory are read on every scrape (about a
 * microsecond each); the open-descriptor count needs a listing of /proc/self/fd (tens of microseconds under Bun),
 * so it is re-read at most once per FD_SAMPLE_INTERVAL_MS. prom-client's collectDefaultMetrics costs ~3.4 ms
 * per scrape under Bun; these cost a few microseconds.
 */
import { readdirSync } from "node:fs";

/** How old the open-descriptor count may be. */
export const FD_SAMPLE_INTERVAL_MS = 1000;

export interface ProcessSample {
  cpuSeconds: number;
  residentBytes: number;
  openFds: number;
}

let fdCount = -1;
let fdSampledAt = -Infinity;

function openFds(now: number): number {
  if (now - fdSampledAt >= FD_SAMPLE_INTERVAL_MS || fdCount < 0) {
    try {
      fdCount = readdirSync("/proc/self/fd").length - 1; // minus the descriptor of the listing itself
    } catch {
      fdCount = 0;
    }
    fdSampledAt = now;
  }
  return fdCount;
}

/** Reads the figures of the current process (CPU of every thread, user + system). */
export function sampleProcess(now = performance.now()): ProcessSample {
  const u = process.cpuUsage();
  return { cpuSeconds: (u.user + u.system) / 1e6, residentBytes: process.memoryUsage.rss(), openFds: openFds(now) };
}
