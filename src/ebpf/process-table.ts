/**
 * A bounded cache of processes on the host, fed by the `process` program set (exec, fork and exit events) and
 * seeded from /proc at start: pid, ppid, comm, executable, uid, cgroup id and container id (from the cgroup
 * path). Collectors read it synchronously with `forPid` (or `lookup`, which reads /proc for a process it has
 * not seen). Exited processes stay findable for a while in a smaller second cache, so events that race an exit
 * still resolve.
 *
 * What a process runs is its `image`: one object shared by the process that exec'd it and every child it forked
 * without exec'ing (pre-fork servers, per-connection children), so children keep their parent's executable and
 * container. A process read from /proc (at start, or on a miss) shares its parent's image only when it runs the
 * same executable in the same container with the same address-space layout (code, stack, argument and
 * environment addresses): a fork copies the layout, an exec of the same binary gets a new one (ASLR), so a child
 * that exec'd its parent's program (a runtime starting a copy of itself) is its own workload. The executable is always read the same way, from /proc/<pid>/exe (at exec time and when seeding at
 * start), so a process keeps its name across an agent restart; runc's cloned binary (`/memfd:runc_cloned...`) and
 * exec-by-descriptor paths (`/dev/fd/N`, `/proc/self/exe`) never become a name (the task name is used instead).
 */
import { readdirSync, readFileSync, readlinkSync, statSync } from "node:fs";
import { basename } from "node:path";
import type { ProcessEvent } from "./sets/process-decoder";

export const PROCESS_TABLE_CAPACITY = 65_536;
export const EXITED_CAPACITY = 4096;
const CGROUP_CACHE_CAPACITY = 16_384;
const CONTAINER_ID_RE = /(?:^|[/:-])([0-9a-f]{64})(?:\.scope)?(?:\/|$)/;

/** What a process runs: shared (same object) by the process that exec'd it and the children it forked without exec. */
export interface ProcessImage {
  /** The pid that exec'd it (the first process seen running it when seeded). */
  readonly pid: number;
  /** Path of the executable ("" when unknown). */
  readonly executable: string;
  /** Base name of the executable, or the task name when the path is unknown. */
  readonly executableName: string;
  /** Container id (64 hex), when the image runs in a container. */
  readonly containerId: string | undefined;
}

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
  /** What it runs (the parent's image for a child forked without exec). */
  image: ProcessImage;
  /** When it was read from /proc by `lookup` (ms; undefined when it came from an event or the seed). */
  readAtMs?: number;
}

export interface ProcStat {
  ppid: number;
  comm: string;
  uid: number;
  /** Where exec placed code, stack, arguments and environment: equal in a process and a child it forked without exec. */
  layout?: string;
}

/**
 * The address-space layout in the fields of /proc/<pid>/stat after the command (state first): start_code,
 * start_stack, arg_start, env_start. A fork copies them; an exec sets them anew (randomized). Undefined when the
 * kernel hides them (zeros: no permission to inspect the process, or a kernel thread).
 */
export function layoutOf(fields: readonly string[]): string | undefined {
  const values = [fields[23], fields[25], fields[45], fields[47]];
  if (values.some((v) => v === undefined || v === "" || v === "0")) return undefined;
  return values.join(":");
}

/** Reads a process's facts from /proc; injectable for tests. Every function returns undefined when the process is gone. */
export interface ProcSource {
  /** Text of /proc/<pid>/cgroup ("hierarchy:controllers:path" lines; v2 is "0::path"). */
  cgroupPath(pid: number): string | undefined;
  /**
   * The cgroup v2 id (the inode of its directory, what the BPF programs report) of a v2 cgroup path as
   * /proc/<pid>/cgroup gives it; undefined when it cannot be told (no cgroup2 mount, a path outside this cgroup
   * namespace, the cgroup gone).
   */
  cgroupInode?(path: string): bigint | undefined;
  exe(pid: number): string | undefined;
  /** ppid, comm and uid of a running process; `layout`: its address-space layout (see `layoutOf`), when readable. */
  stat(pid: number): ProcStat | undefined;
  pids(): number[];
}

/** Where cgroup2 is mounted, from `root`/self/mountinfo (its fifth field, the type after " - "); undefined when not. */
export function cgroup2Mount(root: string): string | undefined {
  try {
    for (const line of readFileSync(`${root}/self/mountinfo`, "utf8").split("\n")) {
      const sep = line.indexOf(" - ");
      if (sep < 0 || !line.startsWith("cgroup2 ", sep + 3)) continue;
      return line.slice(0, sep).split(" ")[4];
    }
  } catch {
    /* no mountinfo: not told */
  }
  return undefined;
}

/** A ProcSource reading the proc filesystem mounted at `root`. */
export function procfsAt(root: string): ProcSource {
  let mount: string | undefined | null = null;
  return {
  cgroupPath(pid) {
    try {
      return readFileSync(`${root}/${pid}/cgroup`, "utf8");
    } catch {
      return undefined;
    }
  },
  cgroupInode(path) {
    if (mount === null) mount = cgroup2Mount(root);
    if (mount === undefined || !path.startsWith("/") || path.includes("/..")) return undefined;
    try {
      return statSync(`${mount}${path}`, { bigint: true }).ino;
    } catch {
      return undefined;
    }
  },
  exe(pid) {
    try {
      return readlinkSync(`${root}/${pid}/exe`);
    } catch {
      return undefined;
    }
  },
  stat(pid) {
    try {
      const stat = readFileSync(`${root}/${pid}/stat`, "utf8");
      const open = stat.indexOf("(");
      const close = stat.lastIndexOf(")");
      const fields = stat.slice(close + 2).split(" ");
      const status = readFileSync(`${root}/${pid}/status`, "utf8");
      const uid = /^Uid:\s+(\d+)/m.exec(status);
      return { comm: stat.slice(open + 1, close), ppid: Number(fields[1]), uid: uid ? Number(uid[1]) : 0, layout: layoutOf(fields) };
    } catch {
      return undefined;
    }
  },
  pids() {
    try {
      return readdirSync(root).filter((n) => /^\d+$/.test(n)).map(Number);
    } catch {
      return [];
    }
  },
  };
}

export const procfs: ProcSource = procfsAt("/proc");

/** Paths that name no program: exec by descriptor, and runc's cloned binary as /proc/<pid>/exe shows it. */
const NOT_A_PROGRAM_RE = /^\/(?:proc\/self\/exe|proc\/self\/fd\/\d+|dev\/fd\/\d+|memfd:)/;
const DELETED_SUFFIX = " (deleted)";

/**
 * The executable path of a process: /proc/<pid>/exe (without a " (deleted)" suffix), else the path given to
 * execve when absolute, else "" (never a descriptor path or runc's memfd copy). The same answer at exec time and
 * when seeding, so names survive an agent restart.
 */
export function executablePath(proc: ProcSource, pid: number, execFilename = ""): string {
  let path = proc.exe(pid);
  if (path?.endsWith(DELETED_SUFFIX)) path = path.slice(0, -DELETED_SUFFIX.length);
  if (path && path.startsWith("/") && !NOT_A_PROGRAM_RE.test(path)) return path;
  if (execFilename.startsWith("/") && !NOT_A_PROGRAM_RE.test(execFilename)) return execFilename;
  return "";
}

/** How long a process `lookup` read from /proc (and no event has described since) is trusted before it is read again (pid reuse). */
export const LOOKUP_TTL_MS = 30_000;
/** How long "this pid is not in /proc" is remembered by `lookup`. */
const MISSING_TTL_MS = 1000;
const MISSING_CAPACITY = 4096;

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

/**
 * Whether the cgroup v2 id (what the BPF programs report) tells containers apart for a process with this
 * /proc/<pid>/cgroup text: on a pure v2 host, or where the v2 path itself names the container. On a hybrid host
 * (v1 hierarchies beside "0::/") every process may share one v2 cgroup, containers and host processes alike, so
 * an answer found there must not be remembered for the id.
 */
export function cgroupIdDecides(text: string): boolean {
  const lines = text.split("\n").filter((l) => l.length > 0);
  const v2 = lines.filter((l) => l.startsWith("0::"));
  if (v2.length === lines.length) return true;
  return v2.some((l) => CONTAINER_ID_RE.test(l.slice(3)));
}

/** The v2 cgroup path in /proc/<pid>/cgroup text (its "0::" line), or undefined. */
export function v2PathOf(text: string): string | undefined {
  for (const line of text.split("\n")) if (line.startsWith("0::")) return line.slice(3);
  return undefined;
}

/**
 * Whether a process read from /proc is a child its parent forked without exec'ing: the same executable in the same
 * container, and the same address-space layout where both layouts are known.
 */
function forkedFrom(child: { executable: string; containerId: string | undefined; layout?: string }, parent: { executable: string; containerId: string | undefined; layout?: string }): boolean {
  if (child.executable === "" || child.executable !== parent.executable || child.containerId !== parent.containerId) return false;
  return child.layout === undefined || parent.layout === undefined || child.layout === parent.layout;
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
  /** pid -> when "not in /proc" stops being believed (ms). */
  readonly #missing = new Map<number, number>();
  #evicted = 0;
  readonly #listeners = new Set<(e: ProcessEvent) => void>();

  constructor(
    readonly proc: ProcSource = procfs,
    readonly capacity = PROCESS_TABLE_CAPACITY,
    readonly exitedCapacity = EXITED_CAPACITY,
    readonly now: () => number = Date.now,
  ) {}

  /** The process with this pid (running, or exited recently), or undefined. O(1). */
  forPid(pid: number): ProcessInfo | undefined {
    return this.#live.get(pid) ?? this.#exited.get(pid);
  }

  /**
   * forPid, else the process read from /proc now and remembered (a child forked before the agent saw it, or
   * one the table evicted); undefined when /proc has no such process either (remembered for a second).
   */
  lookup(pid: number): ProcessInfo | undefined {
    const known = this.forPid(pid);
    if (pid <= 0) return undefined;
    if (known && (known.readAtMs === undefined || known.exitedAtNs !== undefined || this.now() - known.readAtMs < LOOKUP_TTL_MS)) return known;
    const until = this.#missing.get(pid);
    if (!known && until !== undefined && until > this.now()) return undefined;
    const info = this.#read(pid, known?.image);
    if (!info) {
      if (known) return known;
      setBounded(this.#missing, pid, this.now() + MISSING_TTL_MS, MISSING_CAPACITY);
      return undefined;
    }
    this.#missing.delete(pid);
    this.#put(info);
    return info;
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
    this.#remember(cgroupId, path, id);
    return id;
  }

  /**
   * Remembers the container (or none) of cgroup id `cgroupId`, read from `path` (/proc/<pid>/cgroup text) after the
   * event that reported the id: only where the id tells containers apart (cgroupIdDecides) and where the path read
   * is still that cgroup. A process can move between the event and the read: runc starts a container's first
   * process in runc's own cgroup and moves it into the container's, so its exec reports the host cgroup's id while
   * /proc shows the container's path; remembered, that answer made every later process of the host cgroup (a
   * shell's curl) a process of the container.
   */
  #remember(cgroupId: bigint, path: string, id: string | undefined): void {
    if (cgroupId === 0n || !cgroupIdDecides(path)) return;
    const v2 = v2PathOf(path);
    if (v2 === undefined || this.proc.cgroupInode?.(v2) !== cgroupId) return;
    setBounded(this.#containerByCgroup, cgroupId, id ?? null, CGROUP_CACHE_CAPACITY);
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

  /**
   * A running process as /proc shows it; a child running its parent's executable in its container shares the
   * parent's image, and a process read again keeps its image while it runs the same thing.
   */
  #read(pid: number, previous?: ProcessImage): ProcessInfo | undefined {
    const st = this.proc.stat(pid);
    if (!st) return undefined;
    const executable = executablePath(this.proc, pid);
    const path = this.proc.cgroupPath(pid);
    const containerId = path === undefined ? undefined : containerIdFromCgroup(path);
    const parent = this.forPid(st.ppid);
    const same = (i: ProcessImage | undefined) => i !== undefined && i.executable === executable && i.containerId === containerId && executable !== "";
    const forked = () => parent !== undefined && forkedFrom({ executable, containerId, layout: st.layout }, { ...parent.image, layout: this.proc.stat(st.ppid)?.layout });
    const image = same(previous) ? previous! : forked() ? parent!.image : { pid, executable, executableName: executable ? basename(executable) : st.comm, containerId };
    return { pid, ppid: st.ppid, comm: st.comm, executable, executableName: image.executableName, uid: st.uid, cgroupId: 0n, containerId, exitedAtNs: undefined, image, readAtMs: this.now() };
  }

  /** A process described by its image. */
  static #info(pid: number, ppid: number, comm: string, uid: number, cgroupId: bigint, image: ProcessImage, exitedAtNs?: bigint): ProcessInfo {
    return { pid, ppid, comm, executable: image.executable, executableName: image.executableName, uid, cgroupId, containerId: image.containerId, exitedAtNs, image };
  }

  /** Calls `fn` with every event applied (after the table took it); returns the unsubscribe function. */
  subscribe(fn: (e: ProcessEvent) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  /** Applies one event of the `process` set, then tells the subscribers. */
  apply(e: ProcessEvent): void {
    this.#apply(e);
    for (const fn of this.#listeners) fn(e);
  }

  #apply(e: ProcessEvent): void {
    if (e.kind === "exec") {
      const executable = executablePath(this.proc, e.pid, e.filename);
      const image: ProcessImage = { pid: e.pid, executable, executableName: executable ? basename(executable) : e.comm, containerId: this.#containerId(e.pid, e.cgroupId, e.ppid) };
      this.#put(ProcessTable.#info(e.pid, e.ppid, e.comm, e.uid, e.cgroupId, image));
      return;
    }
    if (e.kind === "fork") {
      // Per-CPU perf buffers (kernels < 5.8) can deliver a child's exec before its fork: the fork does not undo it.
      const known = this.#live.get(e.pid);
      if (known && known.readAtMs === undefined && known.image.pid === e.pid && known.ppid === e.ppid) return;
      // The child runs what its parent runs, in the parent's container, until it execs.
      const parent = this.lookup(e.ppid);
      this.#missing.delete(e.pid);
      if (!parent) {
        this.lookup(e.pid);
        return;
      }
      // A parent that moved to another cgroup after its exec (e.g. into a container's) gives its child that container;
      // when the child's cgroup cannot be read (gone already, or the parent was seeded without a cgroup id), the parent's.
      let containerId = parent.image.containerId;
      if (e.cgroupId !== parent.cgroupId) {
        const cached = this.#containerByCgroup.get(e.cgroupId);
        const path = cached === undefined ? this.proc.cgroupPath(e.pid) : undefined;
        if (cached !== undefined) containerId = cached ?? undefined;
        else if (path !== undefined) {
          containerId = containerIdFromCgroup(path);
          this.#remember(e.cgroupId, path, containerId);
        }
      }
      const image = containerId === parent.image.containerId ? parent.image : { ...parent.image, containerId };
      this.#put(ProcessTable.#info(e.pid, e.ppid, e.comm, e.uid, e.cgroupId, image));
      return;
    }
    const known = this.#live.get(e.pid);
    this.#live.delete(e.pid);
    let info: ProcessInfo;
    if (known) info = { ...known, exitedAtNs: e.timestampNs };
    else {
      const parent = this.forPid(e.ppid);
      const containerId = this.#containerByCgroup.get(e.cgroupId) ?? undefined;
      const image = parent && parent.cgroupId === e.cgroupId ? parent.image : { pid: e.pid, executable: "", executableName: e.comm, containerId };
      info = ProcessTable.#info(e.pid, e.ppid, e.comm, e.uid, e.cgroupId, image, e.timestampNs);
    }
    setBounded(this.#exited, e.pid, info, this.exitedCapacity);
  }

  /**
   * Adds the processes running now (read from /proc), up to the capacity; returns how many were added. A child
   * running its parent's executable in the same container shares the parent's image, as if the table had seen it fork.
   */
  seed(): number {
    const read = new Map<number, { st: ProcStat; executable: string; containerId: string | undefined; layout?: string }>();
    for (const pid of this.proc.pids()) {
      if (this.#live.size + read.size >= this.capacity) break;
      if (this.#live.has(pid)) continue;
      const st = this.proc.stat(pid);
      if (!st) continue;
      const path = this.proc.cgroupPath(pid);
      read.set(pid, { st, executable: executablePath(this.proc, pid), containerId: path === undefined ? undefined : containerIdFromCgroup(path), layout: st.layout });
    }
    const images = new Map<number, ProcessImage>();
    const imageOf = (pid: number, depth: number): ProcessImage => {
      let image = images.get(pid);
      if (image) return image;
      const r = read.get(pid)!;
      const parent = read.get(r.st.ppid);
      if (parent && depth < 64 && forkedFrom(r, parent)) image = imageOf(r.st.ppid, depth + 1);
      else if (!parent) {
        // The parent was in the table before (a seed after events): its layout is read now.
        const known = this.#live.get(r.st.ppid)?.image;
        if (known && forkedFrom(r, { ...known, layout: this.proc.stat(r.st.ppid)?.layout })) image = known;
      }
      if (!image) {
        image = { pid, executable: r.executable, executableName: r.executable ? basename(r.executable) : r.st.comm, containerId: r.containerId };
      }
      images.set(pid, image);
      return image;
    };
    for (const [pid, r] of read) this.#live.set(pid, ProcessTable.#info(pid, r.st.ppid, r.st.comm, r.st.uid, 0n, imageOf(pid, 0)));
    return read.size;
  }
}
