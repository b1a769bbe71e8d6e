/**
 * Drops the start-up pages of the executable from the process's resident set. Bun's code and constant data are
 * mapped from the executable file (a 100+ MB binary); start-up (module evaluation, configuration, libbpf loads)
 * runs code that steady state never runs again, and every fault maps its 64 KB neighbourhood, so ~50 MB of the
 * file stay mapped. madvise(MADV_DONTNEED) on the read-only file mappings unmaps them: the pages stay in the
 * page cache (shared, reclaimable), and the ones still in use come back on their next access as minor faults.
 * Only mappings never written (no anonymous, copied-on-write page) are touched, so nothing is lost.
 */
import { dlopen, FFIType } from "bun:ffi";
import { readFileSync, readlinkSync } from "node:fs";
import { findLibrary } from "./library-path";

const MADV_DONTNEED = 4;
const KB = 1024;

export interface Mapping {
  start: bigint;
  end: bigint;
  /** Resident bytes. */
  rss: number;
}

/** The read-only mappings of `file` in smaps text that have resident pages and no anonymous (written) page. */
export function releasableMappings(smaps: string, file: string): Mapping[] {
  const out: Mapping[] = [];
  let current: (Mapping & { anonymous: number }) | undefined;
  const finish = () => {
    if (current && current.rss > 0 && current.anonymous === 0) out.push({ start: current.start, end: current.end, rss: current.rss });
    current = undefined;
  };
  for (const line of smaps.split("\n")) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      finish();
      if (head[4] === file && !head[3]!.includes("w")) current = { start: BigInt(`0x${head[1]}`), end: BigInt(`0x${head[2]}`), rss: 0, anonymous: -1 };
      continue;
    }
    if (!current) continue;
    const field = /^(Rss|Anonymous):\s+(\d+) kB/.exec(line);
    if (field?.[1] === "Rss") current.rss = Number(field[2]) * KB;
    else if (field?.[1] === "Anonymous") current.anonymous = Number(field[2]) * KB;
  }
  finish();
  return out;
}

let madvise: ((addr: bigint, length: bigint, advice: number) => number) | null | undefined;

function openMadvise(env: Record<string, string | undefined>): typeof madvise {
  if (madvise !== undefined) return madvise;
  const libc = findLibrary("libc.so.6", env);
  try {
    const f = libc ? dlopen(libc, { madvise: { args: [FFIType.u64, FFIType.u64, FFIType.i32], returns: FFIType.i32 } }).symbols.madvise : undefined;
    madvise = f ? (addr, length, advice) => f(addr, length, advice) : null;
  } catch {
    madvise = null;
  }
  return madvise;
}

/**
 * Unmaps the resident pages of the executable's read-only mappings; returns the bytes that were resident in
 * them (0 without /proc or a C library with madvise).
 */
export function releaseExecutablePages(env: Record<string, string | undefined>): number {
  let smaps: string;
  let exe: string;
  try {
    exe = readlinkSync("/proc/self/exe");
    smaps = readFileSync("/proc/self/smaps", "utf8");
  } catch {
    return 0;
  }
  const advise = openMadvise(env);
  if (!advise) return 0;
  let released = 0;
  for (const m of releasableMappings(smaps, exe)) if (advise(m.start, m.end - m.start, MADV_DONTNEED) === 0) released += m.rss;
  return released;
}
