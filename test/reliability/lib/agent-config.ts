/** Process figures the reliability suite reads from /proc (its configurations come from test/helpers/quiet-config.ts). */
import { readdirSync, readFileSync } from "node:fs";

/** RSS in KiB of a process, from /proc (0 when it is gone). */
export function rssKiB(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/** Open file descriptors of a process. */
export function fdCount(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return 0;
  }
}
