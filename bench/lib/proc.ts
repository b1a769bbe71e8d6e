/** What the benchmarks read of processes from /proc. */
import { readdirSync, readFileSync } from "node:fs";

/** Clock ticks per second of /proc/<pid>/stat's utime and stime (USER_HZ: 100 on Linux). */
export const CLOCK_TICKS_PER_SECOND = 100;

/** utime + stime of process `pid` (every thread) in seconds. The fields are counted after the `(comm)` field's last `)`. */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / CLOCK_TICKS_PER_SECOND;
}

/** Sets the nice value of every thread of process `pid` (renice of the pid alone moves its main thread only). */
export function reniceAll(pid: number, nice: number): void {
  for (const tid of readdirSync(`/proc/${pid}/task`)) Bun.spawnSync(["renice", "-n", String(nice), "-p", tid], { stdout: "ignore", stderr: "ignore" });
}
