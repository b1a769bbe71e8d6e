/**
 * A bounded cache of processes on the host, fed by the `process` program set (exec and exit events) and
 * seeded from /proc at start: pid, ppid, comm, executable, uid, cgroup id and container id (from the cgroup
 * path). Collectors read it synchronously with `forPid`. Exited processes stay findable for a while in a
 * smaller second cache, so events that race an exit still resolve.
 */
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { basename } from "node:path";
import type { ProcessEvent } from "./sets/process-decoder";

export const PROCESS_TABLE_CAPACITY = 65_536;
export const EXITED_CAPACITY = 4096;
const CGROUP_CACHE_CAPACITY = 16_384;
const CONTAINER_ID_RE = /(?:^|[/:-])([0-9a-f]{64})(?:\.scope)?(?:\/|$)/;

export interface ProcessInfo {
  pid: number;
  ppid: number;
  /** Kernel task name (16 bytes at most). */
  comm: string;
  /** Path of the executable ("" when unknown). */
  executable: string;
  /** Base name of the executable, or comm when the path is unknown. */
  executableName: string;
  uid: number;
  /** cgroup v2 id (0 when unknown, e.g. seeded from /proc). */
  cgroupId: bigint;
  /** Container id (64 hex) from the cgroup path, when the process runs in a container. */
  containerId: string | undefined;
  /** Set when the process has exited (ns, monotonic clock of the kernel). */
  exitedAtNs: bigint | undefined;
}

/** Reads a process's facts from /proc; injectable for tests. Every function returns undefined when the process is gone. */
export interface ProcSource {
  /** Text of /proc/<pid>/cgroup ("hierarchy:controllers:path" lines; v2 is "0::path"). */
  cgroupPath(pid: number): string | undefined;
  exe(pid: number): string | undefined;
  /** ppid, comm and uid of a running process. */
  stat(pid: number): { ppid: number; comm: string; uid: number } | undefined;
  pids(): number[];
}

export const procfs: ProcSource = {
  cgroupPath(pid) {
    try {
      return readFileSync(`/proc/${pid}/cgroup`, "utf8");
    } catch {
      return undefined;
    }
  },
  exe(pid) {
    try {
      return readlinkSync(`/proc/${pid}/exe`);
    } catch {
      return undefined;
    }
  },
  stat(pid) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const open = stat.indexOf("(");
      const close = stat.lastIndexOf(")");
      const fields = stat.slice(close + 2).split(" ");
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      const uid = /^Uid:\s+(\d+)/m.exec(status);
      return { comm: stat.slice(open + 1, close), ppid: Number(fields[1]), uid: uid ? Number(uid[1]) : 0 };
    } catch {
      return undefined;
    }
  },
  pids() {
    try {
      return readdirSync("/proc").filter((n) => /^\d+$/.test(n)).map(Number);
    } catch {
      return [];
    }
  },
};

/**
 * The container id in /proc/<pid>/cgroup text or a single cgroup path (docker, containerd, cri-o, podman
 * layouts: `/docker/<id>`, `docker-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope`), or undefined.
 * The v2 line is tried first, then the v1 hierarchies (hybrid hosts keep container paths there).
 */
export function containerIdFromCgroup(text: string): string | undefined {
  const lines = text.split("\n").filter((l) => l.length > 0);
  const ordered = [...lines.filter((l) => l.startsWith("0::")), ...lines.filter((l) => !l.startsWith("0::"))];
  for (const line of ordered) {
    const path = /^\d+:[^:]*:(.*)$/.exec(line)?.[1] ?? line;
    const id = CONTAINER_ID_RE.exec(path)?.[1];
    if (id) return id;
  }
  return undefined;
}

function setBounded<K, V>(map: Map<K, V>, key: K, value: V, capacity: number): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > capacity) map.delete(map.keys().next().value as K);
}

export class ProcessTable {
  readonly #live = new Map<number, ProcessInfo>();
  readonly #exited = new Map<number, ProcessInfo>();
  readonly #containerByCgroup = new Map<bigint, string | null>();
  #evicted = 0;

  constructor(
    readonly proc: ProcSource = procfs,
    readonly capacity = PROCESS_TABLE_CAPACITY,
    readonly exitedCapacity = EXITED_CAPACITY,
  ) {}

  /** The process with this pid (running, or exited recently), or undefined. O(1). */
  forPid(pid: number): ProcessInfo | undefined {
    return this.#live.get(pid) ?? this.#exited.get(pid);
  }

  /** Running processes known. */
  get size(): number {
    return this.#live.size;
  }

  /** Processes dropped because the table was full. */
  get evicted(): number {
    return this.#evicted;
  }

  #containerId(pid: number, cgroupId: bigint, ppid: number): string | undefined {
    if (cgroupId !== 0n && this.#containerByCgroup.has(cgroupId)) return this.#containerByCgroup.get(cgroupId) ?? undefined;
    const path = this.proc.cgroupPath(pid);
    if (path === undefined) {
      // Gone already: a process keeps its parent's cgroup unless moved, so the parent's answer is the best one.
      const parent = this.forPid(ppid);
      return parent && (cgroupId === 0n || parent.cgroupId === cgroupId) ? parent.containerId : undefined;
    }
    const id = containerIdFromCgroup(path);
    if (cgroupId !== 0n) setBounded(this.#containerByCgroup, cgroupId, id ?? null, CGROUP_CACHE_CAPACITY);
    return id;
  }

  #put(info: ProcessInfo): void {
    this.#exited.delete(info.pid);
    this.#live.delete(info.pid);
    this.#live.set(info.pid, info);
    if (this.#live.size > this.capacity) {
      this.#live.delete(this.#live.keys().next().value as number);
      this.#evicted++;
    }
  }

  /** Applies one event of the `process` set. */
  apply(e: ProcessEvent): void {
    if (e.kind === "exec") {
      let executable = e.filename;
      if (!executable.startsWith("/")) executable = this.proc.exe(e.pid) ?? executable;
      this.#put({
        pid: e.pid,
        ppid: e.ppid,
        comm: e.comm,
        executable,
        executableName: executable ? basename(executable) : e.comm,
        uid: e.uid,
        cgroupId: e.cgroupId,
        containerId: this.#containerId(e.pid, e.cgroupId, e.ppid),
        exitedAtNs: undefined,
      });
      return;
    }
    const known = this.#live.get(e.pid);
    this.#live.delete(e.pid);
    const info: ProcessInfo = known
      ? { ...known, exitedAtNs: e.timestampNs }
      : {
          pid: e.pid,
          ppid: e.ppid,
          comm: e.comm,
          executable: "",
          executableName: e.comm,
          uid: e.uid,
          cgroupId: e.cgroupId,
          containerId: this.#containerByCgroup.get(e.cgroupId) ?? undefined,
          exitedAtNs: e.timestampNs,
        };
    setBounded(this.#exited, e.pid, info, this.exitedCapacity);
  }

  /** Adds the processes running now (read from /proc), up to the capacity; returns how many were added. */
  seed(): number {
    let added = 0;
    for (const pid of this.proc.pids()) {
      if (this.#live.size >= this.capacity) break;
      if (this.#live.has(pid)) continue;
      const st = this.proc.stat(pid);
      if (!st) continue;
      const executable = this.proc.exe(pid) ?? "";
      const path = this.proc.cgroupPath(pid);
      this.#live.set(pid, {
        pid,
        ppid: st.ppid,
        comm: st.comm,
        executable,
        executableName: executable ? basename(executable) : st.comm,
        uid: st.uid,
        cgroupId: 0n,
        containerId: path === undefined ? undefined : containerIdFromCgroup(path),
        exitedAtNs: undefined,
      });
      added++;
    }
    return added;
  }
}
