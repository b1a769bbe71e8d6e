/**
 * Drops the start-up pages of the executable from the process's resident set. Bun's code and constant data are
 * mapped from the executable file (a 100+ MB binary); start-up (module evaluation, configuration, libbpf loads)
 * runs code that steady state never runs again, and every fault maps its 64 KB neighbourhood, so ~50 MB of the
 * file stay mapped. madvise(MADV_DONTNEED) on the read-only file mappings unmaps them: the pages stay in the
 * page cache (shared, reclaimable), and the ones still in use come back on their next access as minor faults.
 * The embedded bundle (Bun's `.bun` section: bytecode, read lazily, a function's at its first call) lies in a
 * writable mapping; there only the pages /proc/self/pagemap shows present and still the file's are released.
 * Only pages never written are touched, so nothing is lost.
 */
import { dlopen, FFIType } from "bun:ffi";
import { closeSync, openSync, readFileSync, readlinkSync, readSync } from "node:fs";
import { findLibrary } from "./library-path";

const MADV_DONTNEED = 4;
const KB = 1024;
const PAGE_BYTES = 4096;
const PAGEMAP_ENTRY_BYTES = 8;
/** /proc/<pid>/pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst). */
const PM_PRESENT = 1n << 63n;
const PM_SWAPPED = 1n << 62n;
const PM_FILE = 1n << 61n;

export interface Mapping {
  start: bigint;
  end: bigint;
  /** Resident bytes. */
  rss: number;
}

interface FileMapping extends Mapping {
  writable: boolean;
  /** File offset of `start`. */
  offset: number;
  /** Resident bytes copied on write (-1: no Anonymous line). */
  anonymous: number;
}

/** The private mappings of `file` in smaps text with resident pages. */
function fileMappings(smaps: string, file: string): FileMapping[] {
  const out: FileMapping[] = [];
  let current: FileMapping | undefined;
  const finish = () => {
    if (current && current.rss > 0 && current.anonymous >= 0) out.push(current);
    current = undefined;
  };
  for (const line of smaps.split("\n")) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S+) ([0-9a-f]+) \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      finish();
      const perms = head[3]!;
      if (head[5] === file && perms.endsWith("p"))
        current = { start: BigInt(`0x${head[1]}`), end: BigInt(`0x${head[2]}`), rss: 0, writable: perms.includes("w"), offset: Number.parseInt(head[4]!, 16), anonymous: -1 };
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

/** The read-only mappings of `file` in smaps text that have resident pages and no anonymous (written) page. */
export function releasableMappings(smaps: string, file: string): Mapping[] {
  return fileMappings(smaps, file)
    .filter((m) => !m.writable && m.anonymous === 0)
    .map(({ start, end, rss }) => ({ start, end, rss }));
}

/**
 * The address ranges (whole pages) of the writable mappings of `file` in smaps text that hold the file's bytes
 * [range.offset, range.offset + range.size), resident pages or not counted.
 */
export function writableRanges(smaps: string, file: string, range: { offset: number; size: number }): Mapping[] {
  const out: Mapping[] = [];
  for (const m of fileMappings(smaps, file)) {
    if (!m.writable) continue;
    const mappedEnd = m.offset + Number(m.end - m.start);
    const from = Math.ceil(Math.max(m.offset, range.offset) / PAGE_BYTES) * PAGE_BYTES;
    const to = Math.floor(Math.min(mappedEnd, range.offset + range.size) / PAGE_BYTES) * PAGE_BYTES;
    if (to > from) out.push({ start: m.start + BigInt(from - m.offset), end: m.start + BigInt(to - m.offset), rss: 0 });
  }
  return out;
}

/**
 * The runs of pages of a private file mapping starting at `start` that are present and still the file's (not
 * copied on write, not swapped), from its pagemap entries (one per page, in order).
 */
export function filePageRuns(entries: BigUint64Array, start: bigint): Mapping[] {
  const out: Mapping[] = [];
  let runStart = -1;
  const close = (i: number) => {
    if (runStart < 0) return;
    out.push({ start: start + BigInt(runStart * PAGE_BYTES), end: start + BigInt(i * PAGE_BYTES), rss: (i - runStart) * PAGE_BYTES });
    runStart = -1;
  };
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i]!;
    const filePage = (e & PM_PRESENT) !== 0n && (e & PM_SWAPPED) === 0n && (e & PM_FILE) !== 0n;
    if (!filePage) close(i);
    else if (runStart < 0) runStart = i;
  }
  close(entries.length);
  return out;
}

/** The pagemap entries of [m.start, m.end) read from the open /proc/self/pagemap `fd` (none on a short read). */
function pagemapEntries(fd: number, m: Mapping): BigUint64Array {
  const entries = new BigUint64Array(Number(m.end - m.start) / PAGE_BYTES);
  const bytes = new Uint8Array(entries.buffer);
  const at = (Number(m.start) / PAGE_BYTES) * PAGEMAP_ENTRY_BYTES;
  let read = 0;
  while (read < bytes.length) {
    const n = readSync(fd, bytes, read, bytes.length - read, at + read);
    if (n <= 0) return new BigUint64Array(0);
    read += n;
  }
  return entries;
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

/** Resident bytes released: of the read-only mappings, and of the embedded bundle. */
export interface Released {
  readOnly: number;
  bundle: number;
}

/**
 * Unmaps the resident pages of the executable's read-only mappings, and with `bundle` (the file range of the
 * embedded bundle) its pages in the writable mapping that were never written (none without /proc or a C library
 * with madvise).
 */
export function releaseExecutablePages(env: Record<string, string | undefined>, bundle?: { offset: number; size: number }): Released {
  const released: Released = { readOnly: 0, bundle: 0 };
  let smaps: string;
  let exe: string;
  try {
    exe = readlinkSync("/proc/self/exe");
    smaps = readFileSync("/proc/self/smaps", "utf8");
  } catch {
    return released;
  }
  const advise = openMadvise(env);
  if (!advise) return released;
  for (const m of releasableMappings(smaps, exe)) if (advise(m.start, m.end - m.start, MADV_DONTNEED) === 0) released.readOnly += m.rss;
  if (!bundle) return released;
  let pagemap: number;
  try {
    pagemap = openSync("/proc/self/pagemap", "r");
  } catch {
    return released;
  }
  try {
    for (const r of writableRanges(smaps, exe, bundle))
      for (const run of filePageRuns(pagemapEntries(pagemap, r), r.start)) if (advise(run.start, run.end - run.start, MADV_DONTNEED) === 0) released.bundle += run.rss;
  } finally {
    closeSync(pagemap);
  }
  return released;
}
