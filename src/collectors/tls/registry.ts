/**
 * The TLS targets attached now, and which processes use each: the uprobes of a target (one library file or one
 * static executable) are attached once, when the first process mapping it is found, and detached when the last
 * one exits or unmaps it. Bounded by `maxTargets`; beyond it a target is listed as not attached. Static
 * executables without symbols are listed as not traceable with the reason. Pure over its injected source and
 * attach function: unit tests run it with fakes.
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
  readonly counters: RegistryCounters = { attaches: 0, detaches: 0, failures: 0 };
  #closed = false;

  constructor(source: TargetSource, attach: AttachProbe, maxTargets: number, verdict: (path: string, size: number) => StaticVerdict = staticVerdict, plan: PlanSites = probeSites) {
    this.#source = source;
    this.#attach = attach;
    this.#maxTargets = maxTargets;
    this.#verdict = verdict;
    this.#plan = plan;
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
    for (const lib of libsslInMaps(maps)) {
      keys.add(lib.key);
      this.#ensure(lib.key, lib.path, this.#source.hostPath(pid, lib.path), "shared", [...TLS_FUNCTIONS]);
    }
    if (keys.size === 0) {
      const exe = this.#source.executable(pid);
      if (exe) {
        let v = this.#verdicts.get(exe.key);
        if (!v) {
          v = this.#verdict(exe.path, exe.size);
          this.#verdicts.set(exe.key, v);
          if (this.#verdicts.size > VERDICT_CACHE_ENTRIES) this.#verdicts.delete(this.#verdicts.keys().next().value as string);
        }
        if (v.kind !== "none") {
          keys.add(exe.key);
          const path = exeName(maps) ?? exe.path;
          if (v.kind === "symbols") this.#ensure(exe.key, path, exe.path, "static", v.functions);
          else if (!this.#targets.has(exe.key)) this.#targets.set(exe.key, { key: exe.key, path, kind: "static", state: "not_traceable", reason: v.reason, functions: [], links: [], pids: new Set() });
        }
      }
    }
    const before = this.#byPid.get(pid);
    for (const k of before ?? []) if (!keys.has(k)) this.#release(pid, k);
    if (keys.size === 0) {
      this.#byPid.delete(pid);
      return;
    }
    for (const k of keys) this.#targets.get(k)?.pids.add(pid);
    this.#byPid.set(pid, keys);
  }

  /** The process exited: it no longer holds its targets. Returns whether it held any. Idempotent. */
  forget(pid: number): boolean {
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

  #ensure(key: string, path: string, hostPath: string, kind: "shared" | "static", functions: TlsFunction[]): void {
    if (this.#targets.has(key)) return;
    const t: Target = { key, path, kind, state: "attached", reason: undefined, functions: [], links: [], pids: new Set() };
    this.#targets.set(key, t);
    if (this.attachedCount > this.#maxTargets) {
      t.state = "limit";
      t.reason = `not attached: ${this.#maxTargets} TLS libraries are attached already`;
      return;
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
        for (const l of links) l.close();
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
      for (const l of t.links) l.close();
      t.links = [];
      t.functions = [];
      t.state = "failed";
      t.reason = `cannot probe ${lacking.join(", ")}: ${missing.join("; ")}`;
      this.counters.failures++;
      return;
    }
    this.counters.attaches++;
  }

  #release(pid: number, key: string): void {
    const t = this.#targets.get(key);
    if (!t) return;
    t.pids.delete(pid);
    if (t.pids.size > 0) return;
    for (const l of t.links) l.close();
    if (t.links.length > 0) this.counters.detaches++;
    this.#targets.delete(key);
  }

  /** The status view's list, attached first. */
  view(): TlsTargetView[] {
    const order: Record<TargetState, number> = { attached: 0, failed: 1, limit: 2, not_traceable: 3 };
    return [...this.#targets.values()]
      .sort((a, b) => order[a.state] - order[b.state] || a.path.localeCompare(b.path))
      .map((t) => {
        const v: TlsTargetView = { path: t.path, kind: t.kind, state: t.state, functions: [...t.functions], processes: t.pids.size, pids: [...t.pids].slice(0, VIEW_PIDS_PER_TARGET) };
        if (t.reason !== undefined) v.reason = t.reason;
        return v;
      });
  }

  /** Detaches everything. Idempotent. */
  close(): void {
    this.#closed = true;
    for (const t of this.#targets.values()) for (const l of t.links) l.close();
    this.#targets.clear();
    this.#byPid.clear();
  }
}

/** The executable's path as the process's first file mapping names it. */
function exeName(maps: string): string | undefined {
  const line = maps.split("\n", 1)[0] ?? "";
  const slash = line.indexOf("/");
  return slash < 0 ? undefined : line.slice(slash);
}
