/**
 * Component `memory/limiter` (readiness `memory`): every `check_interval` (further apart while far below the soft
 * limit: checkDelayMs) compares the agent's resident memory with the soft and hard limits of `agent.memory_limit`.
 * At or above the soft limit it closes the memory gate: the export pipeline drops what collectors submit (reason
 * `memory_limit`), producers that can wait (the log tailer) pause, and the eBPF program sets refuse new events in
 * the kernel; `/ready` says `memory: failed: ...` and `/status` shows `memory.refusing`. Below RESUME_FRACTION of
 * the soft limit it opens the gate again.
 * It also collects garbage once RSS has grown by GC_ON_GROWTH_BYTES since the last collection. While refusing, and at
 * once above the hard limit, it collects garbage, so that what was freed is given back. Modelled on the
 * OpenTelemetry Collector's memory_limiter processor.
 */
import type { BaseContext } from "../lifecycle/context";
import type { Config } from "../config/schema";
import { msOf } from "../config/units";
import type { Component, ComponentHost } from "../lifecycle/component";
import { cgroupMemoryLimit } from "./cgroup";
import { residentBytes } from "../telemetry/process-metrics";
import { mibText as mib, resolveLimits, type MemoryLimits } from "./config";
import type { MemoryGate } from "./gate";

/** The name of the status view (GET /status: `memory`). */
export const MEMORY_VIEW = "memory";
/**
 * Refusing ends below this fraction of the soft limit: what comes in right after the gate opens (a storm's
 * backlog at full rate) starts from below the soft limit rather than at it, and the gate does not flap.
 */
export const RESUME_FRACTION = 0.9;
/**
 * While refusing, garbage is collected at most this often (a full collection of a large heap takes tens of ms):
 * refusing stops new data, not the work on what was taken before it (the ring's backlog, exports), whose garbage
 * still grows the heap.
 */
export const GC_WHILE_REFUSING_EVERY_MS = 1000;
/**
 * Below the limits too: once RSS has grown this much since the last collection, garbage is collected, at most
 * every GC_ON_GROWTH_EVERY_MS. JavaScriptCore lets the heap of a busy agent grow to several times what is live
 * before it collects in full; measured here under the machine's own traffic, mean RSS fell from 198 to 135 MB
 * with a collection every 5 s, for about 4% more CPU.
 */
export const GC_ON_GROWTH_BYTES = 32 * 2 ** 20;
export const GC_ON_GROWTH_EVERY_MS = 2000;
/** ... and at most this often once RSS is past half-way from the soft to the hard limit; above the hard limit, at every check. */
export const GC_NEAR_HARD_LIMIT_EVERY_MS = 100;

/**
 * The resident memory the agent is taken to gain at most in one `check_interval` (800 MB/s at 10 ms). While RSS is
 * further than this below the soft limit the next check may come later, one `check_interval` more per this much
 * headroom, up to MAX_CHECK_STRETCH of them: memory growing slower than this rate cannot pass the soft limit between
 * two checks, as with checks every interval. An idle agent (75 MB against a 320 MiB soft limit) checks every 100 ms
 * instead of every 10 (each timer wakeup costs tens of microseconds of CPU here).
 */
export const GROWTH_PER_CHECK_BYTES = 8 * 2 ** 20;
export const MAX_CHECK_STRETCH = 10;

/** Milliseconds to the next check: `intervalMs` while refusing or within GROWTH_PER_CHECK_BYTES of the soft limit, else stretched by the headroom. */
export function checkDelayMs(intervalMs: number, residentBytes: number, softBytes: number, refusing: boolean): number {
  if (refusing) return intervalMs;
  const steps = Math.floor((softBytes - residentBytes) / GROWTH_PER_CHECK_BYTES);
  return intervalMs * Math.min(MAX_CHECK_STRETCH, Math.max(1, steps));
}

export interface MemoryLimiterOptions {
  /** Resident memory in bytes now (default: the process's RSS). */
  residentBytes?(): number;
  /** The cgroup's memory limit (default: read from /proc/self/cgroup and /sys/fs/cgroup). */
  cgroupLimitBytes?(): number | undefined;
  /** Full garbage collection (default: Bun.gc(true)). */
  collectGarbage?(): void;
}

/** What GET /status shows under `memory`. */
export interface MemoryView {
  enabled: boolean;
  resident_bytes: number;
  soft_limit_bytes: number;
  hard_limit_bytes: number;
  refusing: boolean;
  /** Times the soft limit was crossed upwards since start. */
  refusals: number;
  /** Events the eBPF programs refused in the kernel while refusing. */
  refused_in_kernel: number;
}


export class MemoryLimiter implements Component {
  readonly id = "memory/limiter";
  readonly readiness = "memory" as const;
  readonly #ctx: BaseContext;
  readonly #gate: MemoryGate;
  readonly #resident: () => number;
  readonly #cgroupLimit: () => number | undefined;
  readonly #gc: () => void;
  #limits: MemoryLimits;
  #enabled: boolean;
  #host: ComponentHost | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;
  #intervalMs = 0;
  /** The timer's interval now (checkDelayMs of the last check). */
  #timerMs = 0;
  #lastResident = 0;
  #refusals = 0;
  /** The kind of refusal last reported (above the soft limit, or not yet back below it); undefined while accepting. */
  #reportedKind: "above" | "resuming" | undefined;
  #lastGcMs = -Infinity;
  /** RSS right after the last collection (or at start). */
  #rssAfterGc: number | undefined;

  constructor(ctx: BaseContext, gate: MemoryGate, o: MemoryLimiterOptions = {}) {
    this.#ctx = ctx;
    this.#gate = gate;
    this.#resident = o.residentBytes ?? residentBytes;
    this.#cgroupLimit = o.cgroupLimitBytes ?? (() => cgroupMemoryLimit());
    this.#gc = o.collectGarbage ?? (() => Bun.gc(true));
    this.#enabled = ctx.config.agent.memory_limit.enabled;
    this.#limits = resolveLimits(ctx.config.agent.memory_limit, this.#cgroupLimit());
    ctx.status.provide(MEMORY_VIEW, () => this.view());
  }

  /** The limits in force. */
  get limits(): MemoryLimits {
    return this.#limits;
  }

  view(): MemoryView {
    return {
      enabled: this.#enabled,
      resident_bytes: this.#lastResident,
      soft_limit_bytes: this.#limits.softBytes,
      hard_limit_bytes: this.#limits.hardBytes,
      refusing: this.#gate.refusing,
      refusals: this.#refusals,
      refused_in_kernel: this.#gate.refusedInKernel,
    };
  }

  /** Compares resident memory with the limits now and opens or closes the gate; returns whether it refuses. Also run by the timer. */
  check(): boolean {
    if (!this.#enabled) return false;
    let rss = this.#resident();
    const { softBytes, hardBytes } = this.#limits;
    const now = performance.now();
    const sinceGc = now - this.#lastGcMs;
    const nearHard = rss >= softBytes + (hardBytes - softBytes) / 2;
    this.#rssAfterGc ??= rss;
    const grown = rss - this.#rssAfterGc >= GC_ON_GROWTH_BYTES && sinceGc >= GC_ON_GROWTH_EVERY_MS;
    if (grown || rss >= hardBytes || (nearHard && sinceGc >= GC_NEAR_HARD_LIMIT_EVERY_MS) || (this.#gate.refusing && rss >= softBytes && sinceGc >= GC_WHILE_REFUSING_EVERY_MS)) {
      this.#gc();
      this.#lastGcMs = now;
      rss = this.#resident();
      this.#rssAfterGc = rss;
    }
    this.#lastResident = rss;
    if (rss >= softBytes || (this.#gate.refusing && rss >= softBytes * RESUME_FRACTION)) {
      if (!this.#gate.refusing) {
        this.#refusals++;
        this.#host?.logger.warn("memory above the soft limit: refusing new data", { resident_bytes: rss, soft_limit_bytes: softBytes, hard_limit_bytes: hardBytes });
      }
      // Reported when refusal begins and when its kind changes, with the figures of that moment (the live figures
      // are in /status): a reason that changed with every MiB would log a status change at every check.
      const kind = rss >= softBytes ? "above" : "resuming";
      if (kind !== this.#reportedKind) {
        const reason =
          kind === "above"
            ? `refusing new data: resident memory ${mib(rss)} at or above the soft limit ${mib(softBytes)} (hard limit ${mib(hardBytes)})`
            : `refusing new data: resident memory ${mib(rss)} not yet below ${RESUME_FRACTION * 100}% of the soft limit ${mib(softBytes)}`;
        this.#reportedKind = kind;
        this.#gate.set(reason);
        this.#host?.report("recoverable_error", reason);
      }
      return true;
    }
    this.#reportedKind = undefined;
    if (this.#gate.refusing) {
      this.#host?.logger.info("memory below the soft limit again: accepting new data", { resident_bytes: rss, soft_limit_bytes: softBytes });
      this.#gate.set(undefined);
      this.#host?.report("ok");
    }
    return false;
  }

  #startTimer(c: Config): void {
    this.#stopTimer();
    if (!this.#enabled) return;
    this.#intervalMs = msOf(c.agent.memory_limit, "check_interval");
    this.#schedule(this.#intervalMs);
  }

  /**
   * Checks every `delayMs` from now. One interval timer, set again only when checkDelayMs changes (an idle agent's
   * stays as it is): no new timer per check.
   */
  #schedule(delayMs: number): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timerMs = delayMs;
    this.#timer = setInterval(() => {
      const next = checkDelayMs(this.#intervalMs, this.#lastResident, this.#limits.softBytes, this.check());
      if (next !== this.#timerMs && this.#timer) this.#schedule(next);
    }, delayMs);
    this.#timer.unref?.();
  }

  #stopTimer(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #apply(c: Config): void {
    this.#enabled = c.agent.memory_limit.enabled;
    const before = this.#limits.softLimitIgnored;
    this.#limits = resolveLimits(c.agent.memory_limit, this.#cgroupLimit());
    if (this.#limits.softLimitIgnored && this.#limits.softLimitIgnored !== before) this.#warnSoftLimit();
    // New limits: a refusal under way is reported again with them.
    this.#reportedKind = undefined;
    if (!this.#enabled && this.#gate.refusing) this.#gate.set(undefined);
    this.#startTimer(c);
    if (!this.#enabled) this.#host?.report("disabled");
    else if (!this.check()) this.#host?.report("ok");
  }

  async start(host: ComponentHost): Promise<void> {
    this.#host = host;
    host.logger.info("memory limits", { enabled: this.#enabled, soft_limit_bytes: this.#limits.softBytes, hard_limit_bytes: this.#limits.hardBytes, source: this.#limits.source });
    if (this.#limits.softLimitIgnored) this.#warnSoftLimit();
    this.#apply(this.#ctx.config);
  }

  #warnSoftLimit(): void {
    this.#host?.logger.warn("agent.memory_limit.soft_limit not used", { key: "agent.memory_limit.soft_limit", reason: this.#limits.softLimitIgnored });
  }

  async shutdown(): Promise<void> {
    this.#stopTimer();
    this.#gate.set(undefined);
  }

  async reload(next: Config): Promise<void> {
    this.#apply(next);
  }
}

export function createMemoryLimiter(ctx: BaseContext, gate: MemoryGate, o?: MemoryLimiterOptions): MemoryLimiter {
  return new MemoryLimiter(ctx, gate, o);
}
