/**
 * The agent's resident set size as the limiter reads it every check_interval (10 ms by default): the second
 * field of /proc/self/statm (pages), read with one pread on a descriptor kept open. process.memoryUsage.rss()
 * reads the same file with an open, a read and a close on every call: 8-11 µs a call here against 1.2-1.4 µs.
 */
import { openSync, readSync } from "node:fs";

const STATM = "/proc/self/statm";
const SPACE = 0x20;
const ZERO = 0x30;

/** A reader of the resident bytes; where statm cannot be read it falls back on process.memoryUsage.rss(). */
export function residentReader(o: { path?: string; pageBytes?: number } = {}): () => number {
  const path = o.path ?? STATM;
  let fd: number | undefined;
  let pageBytes = o.pageBytes ?? 0;
  const buf = Buffer.alloc(128);
  return () => {
    try {
      fd ??= openSync(path, "r");
      const n = readSync(fd, buf, 0, buf.length, 0);
      let i = buf.indexOf(SPACE);
      if (i < 0 || i >= n) throw new Error("statm: no second field");
      let pages = 0;
      for (i++; i < n && buf[i]! >= ZERO && buf[i]! <= ZERO + 9; i++) pages = pages * 10 + (buf[i]! - ZERO);
      // The page size, once: the power of two nearest to what Bun's own reading gives per page.
      if (pageBytes === 0) pageBytes = 2 ** Math.round(Math.log2(process.memoryUsage.rss() / Math.max(1, pages)));
      return pages * pageBytes;
    } catch {
      return process.memoryUsage.rss();
    }
  };
}
