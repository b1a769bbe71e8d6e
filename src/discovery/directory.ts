/**
 * The workload directory: what every discovery source knows about each container (merged), and the
 * process -> container map that collectors use to label telemetry. Sources replace their entries after a
 * (re)list and update them on events; entries go away with their containers, and the pid cache is bounded.
 */
import type { Attributes } from "../export/types";
import { readContainerIdOfPid } from "./cgroup";
import type { WorkloadDirectory } from "./types";

/** Most processes remembered by the pid cache (oldest evicted first). */
export const MAX_PID_CACHE_ENTRIES = 65_536;
/** How long a pid found in a container is trusted before /proc is read again (guards against pid reuse). */
export const PID_POSITIVE_TTL_MS = 60_000;
/** How long "this pid is in no container" is remembered. */
export const PID_NEGATIVE_TTL_MS = 10_000;

export type SourceName = "docker" | "kubernetes";
const SOURCES: readonly SourceName[] = ["docker", "kubernetes"];

export interface ContainerEntry {
  /** Full container id (64 hex digits, lower case). */
  id: string;
  attributes: Attributes;
  /** Main process of the container as the runtime reports it (host pid namespace), when known. */
  pid?: number;
  /** IP addresses of the container (Docker networks) or of its pod, for `serviceAt`. */
  addresses?: string[];
  /** Service name those addresses answer for (compose service or container name; pod workload or pod name). */
  service?: string;
}

/** An IPv4 address seen through an IPv6 socket (`::ffff:a.b.c.d`) as plain IPv4. */
const unmapV4 = (a: string) => (a.startsWith("::ffff:") && a.includes(".") ? a.slice(7) : a);

export interface DirectoryOptions {
  /** Where /proc is (tests pass a fake tree). */
  procRoot?: string;
  maxPidEntries?: number;
  now?: () => number;
}

interface PidEntry {
  containerId: string | undefined;
  expiresAt: number;
}

/** Strips a runtime prefix (`docker://`, `containerd://`, `cri-o://`) and lower-cases a container id. */
export function normalizeContainerId(id: string): string {
  const i = id.indexOf("://");
  return (i >= 0 ? id.slice(i + 3) : id).toLowerCase();
}

export class ContainerDirectory implements WorkloadDirectory {
  readonly #entries: Record<SourceName, Map<string, ContainerEntry>> = { docker: new Map(), kubernetes: new Map() };
  readonly #merged = new Map<string, Attributes>();
  readonly #pids = new Map<number, PidEntry>();
  /** Main pid -> container id, rebuilt on the first lookup after a change. */
  #mainPidIndex: Map<number, string> | undefined;
  /** Address -> service name, rebuilt on the first lookup after a change. */
  #addressIndex: Map<string, string> | undefined;
  readonly #procRoot: string;
  readonly #maxPids: number;
  readonly #now: () => number;

  constructor(options: DirectoryOptions = {}) {
    this.#procRoot = options.procRoot ?? "/proc";
    this.#maxPids = options.maxPidEntries ?? MAX_PID_CACHE_ENTRIES;
    this.#now = options.now ?? Date.now;
  }

  forContainer(containerId: string): Attributes | undefined {
    const id = normalizeContainerId(containerId);
    const cached = this.#merged.get(id);
    if (cached) return cached;
    let merged: Attributes | undefined;
    for (const s of SOURCES) {
      const e = this.#entries[s].get(id);
      if (e) merged = { ...merged, ...e.attributes };
    }
    if (merged) this.#merged.set(id, merged);
    return merged;
  }

  forPid(pid: number): Attributes | undefined {
    const id = this.containerIdOf(pid);
    return id ? this.forContainer(id) : undefined;
  }

  serviceAt(address: string, _port: number): string | undefined {
    if (!this.#addressIndex) {
      const index = new Map<string, string>();
      for (const s of SOURCES) for (const e of this.#entries[s].values()) if (e.service) for (const a of e.addresses ?? []) index.set(a, e.service);
      this.#addressIndex = index;
    }
    return this.#addressIndex.get(unmapV4(address));
  }

  forgetPid(pid: number): void {
    this.#pids.delete(pid);
  }

  /** The container whose main process (as the runtime reports it) is `pid`, or undefined. A map lookup. */
  containerOfMainPid(pid: number): string | undefined {
    return this.#mainPids().get(pid);
  }

  /** The container id of a process: the runtime's main pids first, then the cache, then /proc/<pid>/cgroup. */
  containerIdOf(pid: number): string | undefined {
    const now = this.#now();
    const cached = this.#pids.get(pid);
    if (cached && cached.expiresAt > now) return cached.containerId;
    let containerId = this.#mainPids().get(pid);
    containerId ??= readContainerIdOfPid(this.#procRoot, pid);
    this.#remember(pid, containerId, now);
    return containerId;
  }

  /** Adds or replaces what `source` knows about one container. */
  set(source: SourceName, entry: ContainerEntry): void {
    const id = normalizeContainerId(entry.id);
    const prev = this.#entries[source].get(id);
    this.#entries[source].set(id, { ...entry, id });
    this.#merged.delete(id);
    this.#addressIndex = undefined;
    if (prev?.pid !== entry.pid) this.#mainPidIndex = undefined;
    if (prev?.pid && prev.pid !== entry.pid) this.#pids.delete(prev.pid);
  }

  /** Forgets what `source` knows about a container; when no source knows it any more its pids are forgotten too. */
  remove(source: SourceName, containerId: string): void {
    const id = normalizeContainerId(containerId);
    if (!this.#entries[source].delete(id)) return;
    this.#merged.delete(id);
    this.#addressIndex = undefined;
    this.#mainPidIndex = undefined;
    if (!SOURCES.some((s) => this.#entries[s].has(id))) this.#dropPidsOf(new Set([id]));
  }

  /** Replaces everything `source` knows (after a list or re-list); containers not in `entries` are removed. */
  replace(source: SourceName, entries: Iterable<ContainerEntry>): void {
    const next = new Map<string, ContainerEntry>();
    for (const e of entries) {
      const id = normalizeContainerId(e.id);
      next.set(id, { ...e, id });
    }
    const gone = new Set<string>();
    for (const id of this.#entries[source].keys()) if (!next.has(id)) gone.add(id);
    this.#entries[source] = next;
    this.#mainPidIndex = undefined;
    this.#addressIndex = undefined;
    for (const id of gone) this.#merged.delete(id);
    for (const id of next.keys()) this.#merged.delete(id);
    for (const id of gone) if (SOURCES.some((s) => this.#entries[s].has(id))) gone.delete(id);
    if (gone.size) this.#dropPidsOf(gone);
  }

  /** Forgets everything a source knows (it was turned off). */
  clear(source: SourceName): void {
    this.replace(source, []);
  }

  /** What `source` knows now (a snapshot). */
  entries(source: SourceName): ContainerEntry[] {
    return [...this.#entries[source].values()];
  }

  /** Containers known to a source. */
  size(source: SourceName): number {
    return this.#entries[source].size;
  }

  /** Entries in the pid cache (bounded by maxPidEntries). */
  get pidCacheSize(): number {
    return this.#pids.size;
  }

  #mainPids(): Map<number, string> {
    if (this.#mainPidIndex) return this.#mainPidIndex;
    const index = new Map<number, string>();
    for (const s of SOURCES) for (const e of this.#entries[s].values()) if (e.pid) index.set(e.pid, e.id);
    this.#mainPidIndex = index;
    return index;
  }

  #remember(pid: number, containerId: string | undefined, now: number): void {
    this.#pids.delete(pid);
    this.#pids.set(pid, { containerId, expiresAt: now + (containerId ? PID_POSITIVE_TTL_MS : PID_NEGATIVE_TTL_MS) });
    while (this.#pids.size > this.#maxPids) {
      const oldest = this.#pids.keys().next().value as number;
      this.#pids.delete(oldest);
    }
  }

  #dropPidsOf(ids: Set<string>): void {
    for (const [pid, e] of this.#pids) if (e.containerId && ids.has(e.containerId)) this.#pids.delete(pid);
  }
}
