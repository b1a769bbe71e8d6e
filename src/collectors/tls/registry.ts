/**
 * The TLS targets attached now, and which processes use each: the uprobes of a target (one library file or one
 * static executable) are attached once, when the first process mapping it is found, and detached `detachDelayMs`
 * after the last one exits or unmaps it (sweep), so that short-lived processes started again and again (a client
 * run in a loop, a cron job) do not attach and detach the same file each time; a process mapping it in the meantime
 * holds it again. Bounded by `maxTargets` (targets no process holds make room first); beyond it a target is listed
 * as not attached. A uprobe's detach ends on another thread (BpfLinkApi.close's promise), and the kernel makes an
 * attach wait for detaches in flight: done on the event loop, that wait would stop the ring buffers being drained.
 * So no file is attached while a detach is in flight, this registry's or an earlier one's (a reload's; Detaches
 * counts them for the whole process): the process's scan is deferred (deferred pids, and `onDetachesDone` to scan
 * them again). Static executables without symbols are listed as not traceable with the reason. Pure over its
 * injected source, attach function and clock: unit tests run it with fakes.
 */
import type { BpfLinkApi } from "../../../ffi/types";
import { entrySites, probeSites, type ProbeSite } from "./placement";
import { libsslInMaps, staticVerdict, TLS_FUNCTIONS, type StaticVerdict, type TargetSource, type TlsFunction } from "./targets";

/** Pids listed per target in the status view (the count is exact). */
export const VIEW_PIDS_PER_TARGET = 32;
const VERDICT_CACHE_ENTRIES = 4096;
const REQUIRED: readonly TlsFunction[] = ["SSL_read", "SSL_write"];

/** Attaches the entry (ret false) or return (ret true) probe of a site in the file at `binary`; throws when it cannot. */
export type AttachProbe = (binary: string, site: ProbeSite, ret: boolean) => BpfLinkApi;

/** Where the probes of `functions` go in the file at `path` (placement.ts). */
export type PlanSites = (path: string, functions: readonly TlsFunction[]) => ProbeSite[];

export type TargetState = "attached" | "failed" | "not_traceable" | "limit";

export interface TlsTargetView {
  /** Path of the file in the process's mount namespace. */
  path: string;
  /** "shared": a libssl; "static": an executable with OpenSSL linked in. */
  kind: "shared" | "static";
  state: TargetState;
  reason?: string;
  /** Functions whose calls are traced (their own entry and return, or those of the internal function they call). */
  functions: string[];
  /** Processes mapping the file (exact). */
  processes: number;
  /** Some of them (at most VIEW_PIDS_PER_TARGET). */
  pids: number[];
  /** Attached with no process mapping it: when its probes go unless a process maps it again (RFC 3339). */
  detach_at?: string;
}

interface Target {
  key: string;
  path: string;
  kind: "shared" | "static";
  state: TargetState;
  reason: string | undefined;
  functions: TlsFunction[];
  links: BpfLinkApi[];
  pids: Set<number>;
  /** Attached, and no process has held it since then (ms, the registry's clock). */
  idleSinceMs: number | undefined;
}

/** Uprobe detaches in flight in this process, and who waits for none to be. */
export class Detaches {
  #inFlight = 0;
  readonly #waiters = new Set<() => void>();

  get inFlight(): number {
    return this.#inFlight;
  }

  /** Counts `ended` (a link's close) until it settles. */
  track(ended: Promise<void>): void {
    this.#inFlight++;
    const done = () => {
      if (--this.#inFlight > 0) return;
      for (const w of [...this.#waiters]) w();
    };
    void ended.then(done, done);
  }

  /** Calls `fn` each time the last detach in flight ends, until the returned function is called. */
  onIdle(fn: () => void): () => void {
    this.#waiters.add(fn);
    return () => this.#waiters.delete(fn);
  }
}

/** The process's uprobe detaches (every registry, across reloads). */
export const UPROBE_DETACHES = new Detaches();

export interface RegistryOptions {
  verdict?: (path: string, size: number) => StaticVerdict;
  plan?: PlanSites;
  /** How long an attached target no process holds keeps its probes (0: detached at once). */
  detachDelayMs?: number;
  /** Milliseconds since the epoch. */
  now?: () => number;
  /** Called when the last detach in flight has ended (scan the deferred pids then). */
  onDetachesDone?: () => void;
  /** Where detaches in flight are counted (default: the process's, UPROBE_DETACHES). */
  detaches?: Detaches;
}

export interface RegistryCounters {
  attaches: number;
  detaches: number;
  failures: number;
}

export class TlsTargetRegistry {
  readonly #source: TargetSource;
  readonly #attach: AttachProbe;
  readonly #maxTargets: number;
  readonly #targets = new Map<string, Target>();
  readonly #byPid = new Map<number, Set<string>>();
  readonly #verdicts = new Map<string, StaticVerdict>();
  readonly #verdict: (path: string, size: number) => StaticVerdict;
  readonly #plan: PlanSites;
  readonly #detachDelayMs: number;
  readonly #now: () => number;
  readonly #detaches: Detaches;
  readonly #stopWaiting: () => void;
  /** Pids whose scan found a file to attach while detaches were in flight. */
  readonly #deferred = new Set<number>();
  readonly counters: RegistryCounters = { attaches: 0, detaches: 0, failures: 0 };
  #closed = false;

  constructor(source: TargetSource, attach: AttachProbe, maxTargets: number, options: RegistryOptions = {}) {
    this.#source = source;
    this.#attach = attach;
    this.#maxTargets = maxTargets;
    this.#verdict = options.verdict ?? staticVerdict;
    this.#plan = options.plan ?? probeSites;
    this.#detachDelayMs = options.detachDelayMs ?? 0;
    this.#now = options.now ?? Date.now;
    this.#detaches = options.detaches ?? UPROBE_DETACHES;
    const onDone = options.onDetachesDone;
    this.#stopWaiting = onDone ? this.#detaches.onIdle(onDone) : () => {};
  }

  /** The pids whose scan was deferred by detaches in flight, once each (scan them again after onDetachesDone). */
  takeDeferred(): number[] {
    const pids = [...this.#deferred];
    this.#deferred.clear();
    return pids;
  }

  /** Targets with live probes. */
  get attachedCount(): number {
    let n = 0;
    for (const t of this.#targets.values()) if (t.state === "attached") n++;
    return n;
  }

  /** Reads a process's mappings and executable and brings its targets up to date (attaching new files). */
  scan(pid: number): void {
    if (this.#closed) return;
    const maps = this.#source.maps(pid);
    if (maps === undefined) {
      this.forget(pid);
      return;
    }
    const keys = new Set<string>();
    let deferred = false;
    for (const lib of libsslInMaps(maps)) {
      if (this.#ensure(lib.key, lib.path, this.#source.hostPath(pid, lib.path), "shared", [...TLS_FUNCTIONS])) keys.add(lib.key);
      else deferred = true;
    }
    if (keys.size === 0 && !deferred) {
      const exe = this.#source.executable(pid);
      if (exe) {
        let v = this.#verdicts.get(exe.key);
        if (!v) {
          v = this.#verdict(exe.path, exe.size);
          this.#verdicts.set(exe.key, v);
          if (this.#verdicts.size > VERDICT_CACHE_ENTRIES) this.#verdicts.delete(this.#verdicts.keys().next().value as string);
        }
        if (v.kind !== "none") {
          const path = exeName(maps) ?? exe.path;
          if (v.kind === "symbols") {
            if (this.#ensure(exe.key, path, exe.path, "static", v.functions)) keys.add(exe.key);
            else deferred = true;
          } else {
            keys.add(exe.key);
            if (!this.#targets.has(exe.key)) this.#targets.set(exe.key, { key: exe.key, path, kind: "static", state: "not_traceable", reason: v.reason, functions: [], links: [], pids: new Set(), idleSinceMs: undefined });
          }
        }
      }
    }
    if (deferred) this.#deferred.add(pid);
    else this.#deferred.delete(pid);
    const before = this.#byPid.get(pid);
    for (const k of before ?? []) if (!keys.has(k)) this.#release(pid, k);
    if (keys.size === 0) {
      this.#byPid.delete(pid);
      return;
    }
    for (const k of keys) {
      const t = this.#targets.get(k);
      if (!t) continue;
      t.pids.add(pid);
      t.idleSinceMs = undefined;
    }
    this.#byPid.set(pid, keys);
  }

  /** The process exited: it no longer holds its targets. Returns whether it held any. Idempotent. */
  forget(pid: number): boolean {
    this.#deferred.delete(pid);
    const keys = this.#byPid.get(pid);
    if (!keys) return false;
    this.#byPid.delete(pid);
    for (const k of keys) this.#release(pid, k);
    return true;
  }

  /** Whether `pid` maps a target whose probes are attached. */
  holdsAttached(pid: number): boolean {
    for (const k of this.#byPid.get(pid) ?? []) if (this.#targets.get(k)?.state === "attached") return true;
    return false;
  }

  /** Pids holding at least one target. */
  pids(): number[] {
    return [...this.#byPid.keys()];
  }

  /** Detaches the attached targets no process has held for the detach delay; returns how many. */
  sweep(): number {
    const now = this.#now();
    let n = 0;
    for (const t of [...this.#targets.values()]) {
      if (t.idleSinceMs !== undefined && now - t.idleSinceMs >= this.#detachDelayMs) {
        this.#detach(t);
        n++;
      }
    }
    return n;
  }

  /** Makes sure the target `key` is known (attached, or in another state); false when its attach must wait for detaches in flight. */
  #ensure(key: string, path: string, hostPath: string, kind: "shared" | "static", functions: TlsFunction[]): boolean {
    if (this.#targets.has(key)) return true;
    const t: Target = { key, path, kind, state: "attached", reason: undefined, functions: [], links: [], pids: new Set(), idleSinceMs: undefined };
    this.#targets.set(key, t);
    if (this.attachedCount > this.#maxTargets) this.#evictIdle(this.attachedCount - this.#maxTargets);
    if (this.attachedCount > this.#maxTargets) {
      t.state = "limit";
      t.reason = `not attached: ${this.#maxTargets} TLS libraries are attached already`;
      return true;
    }
    if (this.#detaches.inFlight > 0) {
      this.#targets.delete(key);
      return false;
    }
    const missing: string[] = [];
    const attachSite = (site: ProbeSite): boolean => {
      const links: BpfLinkApi[] = [];
      try {
        links.push(this.#attach(hostPath, site, false));
        links.push(this.#attach(hostPath, site, true));
        t.links.push(...links);
        t.functions.push(...site.covers);
        return true;
      } catch (e) {
        this.#closeLinks(links);
        if (site.offset === undefined) missing.push(`${site.program}: ${(e as Error).message}`);
        return false;
      }
    };
    for (const site of this.#plan(hostPath, functions)) {
      // A site the code was read for that does not attach: its functions' own entries.
      if (!attachSite(site) && site.offset !== undefined) for (const s of entrySites(site.covers)) attachSite(s);
    }
    t.functions.sort((a, b) => TLS_FUNCTIONS.indexOf(a) - TLS_FUNCTIONS.indexOf(b));
    const lacking = REQUIRED.filter((f) => !t.functions.includes(f));
    if (lacking.length > 0) {
      this.#closeLinks(t.links);
      t.links = [];
      t.functions = [];
      t.state = "failed";
      t.reason = `cannot probe ${lacking.join(", ")}: ${missing.join("; ")}`;
      this.counters.failures++;
      return true;
    }
    this.counters.attaches++;
    return true;
  }

  /** Closes `links`, counting the detaches that end on another thread until they have. */
  #closeLinks(links: BpfLinkApi[]): void {
    for (const l of links) {
      const ended = l.close();
      if (ended) this.#detaches.track(ended);
    }
  }

  /** Detaches up to `n` attached targets no process holds, the longest idle first. */
  #evictIdle(n: number): void {
    const idle = [...this.#targets.values()].filter((t) => t.idleSinceMs !== undefined).sort((a, b) => a.idleSinceMs! - b.idleSinceMs!);
    for (const t of idle.slice(0, n)) this.#detach(t);
  }

  #release(pid: number, key: string): void {
    const t = this.#targets.get(key);
    if (!t) return;
    t.pids.delete(pid);
    if (t.pids.size > 0) return;
    if (this.#detachDelayMs > 0 && t.links.length > 0) t.idleSinceMs = this.#now();
    else this.#detach(t);
  }

  #detach(t: Target): void {
    this.#closeLinks(t.links);
    if (t.links.length > 0) this.counters.detaches++;
    this.#targets.delete(t.key);
  }

  /** The status view's list, attached first. */
  view(): TlsTargetView[] {
    const order: Record<TargetState, number> = { attached: 0, failed: 1, limit: 2, not_traceable: 3 };
    return [...this.#targets.values()]
      .sort((a, b) => order[a.state] - order[b.state] || a.path.localeCompare(b.path))
      .map((t) => {
        const v: TlsTargetView = { path: t.path, kind: t.kind, state: t.state, functions: [...t.functions], processes: t.pids.size, pids: [...t.pids].slice(0, VIEW_PIDS_PER_TARGET) };
        if (t.reason !== undefined) v.reason = t.reason;
        if (t.idleSinceMs !== undefined) v.detach_at = new Date(t.idleSinceMs + this.#detachDelayMs).toISOString();
        return v;
      });
  }

  /** Detaches everything. Idempotent. */
  close(): void {
    this.#closed = true;
    this.#stopWaiting();
    for (const t of this.#targets.values()) this.#closeLinks(t.links);
    this.#targets.clear();
    this.#byPid.clear();
    this.#deferred.clear();
  }
}

/** The executable's path as the process's first file mapping names it. */
function exeName(maps: string): string | undefined {
  const line = maps.split("\n", 1)[0] ?? "";
  const slash = line.indexOf("/");
  return slash < 0 ? undefined : line.slice(slash);
}
