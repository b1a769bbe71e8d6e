/** What the benchmarks read of processes from /proc. */
import { readdirSync, readFileSync, readlinkSync } from "node:fs";

/** Clock ticks per second of /proc/<pid>/stat's utime and stime (USER_HZ: 100 on Linux). */
export const CLOCK_TICKS_PER_SECOND = 100;

/** utime + stime, in clock ticks, of a /proc stat line (the fields are counted after the `(comm)` field's last `)`). */
function statTicks(stat: string): number {
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(f[11]) + Number(f[12]);
}

/** utime + stime of process `pid` (every thread) in seconds. */
export function cpuSeconds(pid: number): number {
  return statTicks(readFileSync(`/proc/${pid}/stat`, "utf8")) / CLOCK_TICKS_PER_SECOND;
}

/** Threads of process `pid` whose name `match`es: utime + stime in seconds, by thread id. */
export function threadCpuSecondsByTid(pid: number, match: (name: string) => boolean): Map<number, number> {
  const out = new Map<number, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
    } catch {
      continue; // the thread ended
    }
    if (match(stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")))) out.set(Number(tid), statTicks(stat) / CLOCK_TICKS_PER_SECOND);
  }
  return out;
}

/** Threads of process `pid` whose name starts with `prefix` (JSC's compiler threads: "JITWorker"): their utime + stime in seconds. */
export function threadCpuSeconds(pid: number, prefix: string): number {
  let seconds = 0;
  for (const s of threadCpuSecondsByTid(pid, (name) => name.startsWith(prefix)).values()) seconds += s;
  return seconds;
}

/**
 * CPU seconds the threads of two threadCpuSecondsByTid snapshots used between them: those alive at the end, from
 * their start (0 for threads started since). A thread that ended in between is left out rather than subtracted.
 */
export function threadCpuBetween(before: Map<number, number>, after: Map<number, number>): number {
  let seconds = 0;
  for (const [tid, s] of after) seconds += Math.max(0, s - (before.get(tid) ?? 0));
  return seconds;
}

/** Sets the nice value of every thread of process `pid` (renice of the pid alone moves its main thread only). */
export function reniceAll(pid: number, nice: number): void {
  for (const tid of readdirSync(`/proc/${pid}/task`)) Bun.spawnSync(["renice", "-n", String(nice), "-p", tid], { stdout: "ignore", stderr: "ignore" });
}

/** Resident bytes of a process by what they hold, from /proc/<pid>/smaps. */
export interface MemoryBreakdown {
  rss: number;
  /** Pages of the executable file itself (its code, read-only data and embedded bundle). */
  executableFile: number;
  /** Of executableFile: the code mapping (r-xp). */
  executableCode: number;
  /** Of executableFile: the writable mapping that holds Bun's embedded bundle (.bun: bytecode, sources, assets). */
  executableBundle: number;
  /** Pages of other files: shared libraries. */
  libraries: number;
  /** BPF map mappings: ring buffers (every page present from the mmap on) and mmapable arrays. */
  bpfMaps: number;
  /** Anonymous memory: the JavaScript heap and the allocators' pages, JIT code, stacks, copied-on-write pages. */
  anonymous: number;
  /** Of anonymous: JIT code (anonymous rwx mappings). */
  jitCode: number;
}

export function memoryBreakdown(pid: number): MemoryBreakdown {
  const exe = readlinkSync(`/proc/${pid}/exe`);
  const out: MemoryBreakdown = { rss: 0, executableFile: 0, executableCode: 0, executableBundle: 0, libraries: 0, bpfMaps: 0, anonymous: 0, jitCode: 0 };
  let name = "";
  let perms = "";
  let rss = 0;
  for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    const head = /^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      perms = head[1]!;
      name = head[2]!;
      rss = 0;
      continue;
    }
    const field = /^(Rss|Anonymous):\s+(\d+) kB/.exec(line);
    if (!field) continue;
    const bytes = Number(field[2]) * 1024;
    if (field[1] === "Rss") {
      rss = bytes;
      out.rss += bytes;
      if (name.startsWith("anon_inode:bpf-map")) out.bpfMaps += bytes;
      continue;
    }
    // Anonymous: (private pages of the mapping); the file-backed rest is Rss - Anonymous.
    const file = rss - bytes;
    out.anonymous += bytes;
    if (!name && perms.includes("x")) out.jitCode += bytes;
    if (name === exe) {
      out.executableFile += file;
      if (perms.includes("x")) out.executableCode += file;
      else if (perms.startsWith("rw")) out.executableBundle += file;
    } else if (name.startsWith("/")) out.libraries += file;
  }
  return out;
}
