/**
 * Cheap process collectors. CPU time (getrusage) and resident memory (/proc/self/statm, kept open) are read on every scrape (about a
 * microsecond each); the open-descriptor count needs a listing of /proc/self/fd (tens of microseconds under Bun),
 * so it is re-read at most once per FD_SAMPLE_INTERVAL_MS. prom-client's collectDefaultMetrics costs ~3.4 ms
 * per scrape under Bun; these cost a few microseconds.
 */
import { openSync, readdirSync, readSync } from "node:fs";

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

const PAGE_SIZE_BYTES = 4096;
const SPACE_BYTE = 0x20;
const ZERO_BYTE = 0x30;
const NINE_BYTE = 0x39;
const statmBuffer = Buffer.alloc(128);
/**
 * /proc/self/statm kept open: one pread per read (~0.7-1.4 us) instead of process.memoryUsage.rss() (4-11 us: an open,
 * a read and a close each time). Read on every scrape, and by the memory limiter every check_interval.
 */
let statmFd: number | undefined;

/** The process's resident set size in bytes. */
export function residentBytes(): number {
  try {
    statmFd ??= openSync("/proc/self/statm", "r");
    const n = readSync(statmFd, statmBuffer, 0, statmBuffer.length, 0);
    // "size resident shared ...": the second field, read from the bytes (no string made per scrape).
    let i = statmBuffer.indexOf(SPACE_BYTE) + 1;
    let pages = 0;
    let digits = 0;
    for (; i > 0 && i < n && statmBuffer[i]! >= ZERO_BYTE && statmBuffer[i]! <= NINE_BYTE; i++, digits++) pages = pages * 10 + statmBuffer[i]! - ZERO_BYTE;
    if (digits > 0) return pages * PAGE_SIZE_BYTES;
  } catch {
    // No /proc: the runtime's figure below.
  }
  return process.memoryUsage.rss();
}

/** Reads the figures of the current process (CPU of every thread, user + system). */
export function sampleProcess(now = performance.now()): ProcessSample {
  const u = process.cpuUsage();
  return { cpuSeconds: (u.user + u.system) / 1e6, residentBytes: residentBytes(), openFds: openFds(now) };
}
