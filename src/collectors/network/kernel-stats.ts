/**
 * What an HTTP capture set (network, tls) counts in its per-CPU stats array, read each second; what is counted is
 * the increase since the last read.
 * - Span drops: exchanges the kernel did not capture (over the per-second budget, or the ring half full) are
 *   rate_limit drops; an HTTP/2 connection whose forwarding stopped because a record was lost in a full ring (no
 *   record tells user space) is two http2_state_lost drops, one per direction, as user space counts the directions
 *   it finds undecodable.
 * - What the set could not account for at all (svc_ebpf_network_dropped_total, NETWORK_DROP_REASONS): calls on
 *   connections over max_connections, calls whose buffer the in-flight map had no room for, requests replaced by a
 *   pipelined one before their response.
 * - HTTP/2 connections found in their middle (svc_ebpf_http2_midstream_total), and stopped ones forwarded again
 *   (svc_ebpf_http2_resumed_total).
 */
import { SPAN_HTTP2_STATE_LOST_REASON, SPAN_RATE_LIMIT_REASON, type NetworkDropReason } from "../../telemetry/metrics";

/** The per-CPU stats array of a loaded set. */
interface PerCpuCounters {
  sumPerCpuU64(key: number): bigint;
}

/** A counter by reason (svc_spans_dropped_total, svc_ebpf_network_dropped_total). */
interface DropCounter {
  inc(labels: { reason: string }, value: number): void;
}

/** Where the counts go: the span drops, what the set could not account for, the HTTP/2 connections found midway and resumed. */
export interface KernelStatSinks {
  spans: DropCounter;
  network: DropCounter;
  midstream: { inc(value: number): void };
  resumed: { inc(value: number): void };
}

/** The set's STAT_* indexes of what KernelStats reads. */
export interface KernelStatIndexes {
  /** Exchanges refused their capture (rate_limit span drops). */
  sampledOut: number;
  /** HTTP/2 connections stopped with no record to say so (two http2_state_lost span drops each). */
  h2Lost: number;
  /** HTTP/2 connections found in their middle. */
  h2Midstream: number;
  /** Stopped HTTP/2 connections forwarded again. */
  h2Resumed: number;
  /** Each NETWORK_DROP_REASONS count the set keeps. */
  uncounted: ReadonlyArray<{ index: number; reason: NetworkDropReason }>;
}

/** The increases of one slot of a set's per-CPU stats array since the previous read. */
class StatDelta {
  #seen = 0n;

  constructor(readonly index: number) {}

  /** A set just attached: its counters start at 0. */
  reset(): void {
    this.#seen = 0n;
  }

  take(stats: PerCpuCounters): number {
    const now = stats.sumPerCpuU64(this.index);
    const n = Number(now - this.#seen);
    this.#seen = now;
    return Math.max(0, n);
  }
}

export class KernelStats {
  readonly #sampledOut: StatDelta;
  readonly #h2Lost: StatDelta;
  readonly #h2Midstream: StatDelta;
  readonly #h2Resumed: StatDelta;
  readonly #uncounted: Array<{ delta: StatDelta; reason: NetworkDropReason }>;

  constructor(indexes: KernelStatIndexes) {
    this.#sampledOut = new StatDelta(indexes.sampledOut);
    this.#h2Lost = new StatDelta(indexes.h2Lost);
    this.#h2Midstream = new StatDelta(indexes.h2Midstream);
    this.#h2Resumed = new StatDelta(indexes.h2Resumed);
    this.#uncounted = indexes.uncounted.map(({ index, reason }) => ({ delta: new StatDelta(index), reason }));
  }

  /** A set just attached: its counters start at 0. */
  reset(): void {
    this.#sampledOut.reset();
    this.#h2Lost.reset();
    this.#h2Midstream.reset();
    this.#h2Resumed.reset();
    for (const u of this.#uncounted) u.delta.reset();
  }

  /**
   * Counts the increases since the last read into `sinks`; returns the exchanges newly refused their capture and the
   * reasons of the NETWORK_DROP_REASONS counts that rose, with their increase.
   */
  take(stats: PerCpuCounters, sinks: KernelStatSinks): { refused: number; uncounted: Array<[NetworkDropReason, number]> } {
    const refused = this.#sampledOut.take(stats);
    if (refused > 0) sinks.spans.inc({ reason: SPAN_RATE_LIMIT_REASON }, refused);
    const lost = this.#h2Lost.take(stats);
    if (lost > 0) sinks.spans.inc({ reason: SPAN_HTTP2_STATE_LOST_REASON }, 2 * lost);
    const midstream = this.#h2Midstream.take(stats);
    if (midstream > 0) sinks.midstream.inc(midstream);
    const resumed = this.#h2Resumed.take(stats);
    if (resumed > 0) sinks.resumed.inc(resumed);
    const uncounted: Array<[NetworkDropReason, number]> = [];
    for (const { delta, reason } of this.#uncounted) {
      const n = delta.take(stats);
      if (n > 0) {
        sinks.network.inc({ reason }, n);
        uncounted.push([reason, n]);
      }
    }
    return { refused, uncounted };
  }
}

/** Seconds between two warnings of the same reason: a host over max_connections would otherwise log every second. */
const WARN_EVERY_MS = 60_000;

const WARNING: Record<NetworkDropReason, string> = {
  conns_full: "connections not traced: the connection table is full (agent.ebpf.network.max_connections)",
  pending_full: "socket calls not captured: the in-flight map of http_capture syscalls is full",
  red_replaced: "HTTP requests not counted in the RED metrics: pipelined, the next request started before their response",
};

/**
 * A warning per reason when its count rises, at most once a minute each: a rise within a minute of the previous
 * warning waits for the minute's end, and that warning carries all that was counted since the previous one.
 */
export class DropWarnings {
  readonly #last = new Map<NetworkDropReason, number>();
  /** Counted and not yet warned of, by reason. */
  readonly #pending = new Map<NetworkDropReason, number>();

  note(uncounted: ReadonlyArray<[NetworkDropReason, number]>, nowMs: number, logger: { warn(msg: string, fields?: Record<string, unknown>): void } | undefined, fields: Record<string, unknown> = {}): void {
    for (const [reason, n] of uncounted) this.#pending.set(reason, (this.#pending.get(reason) ?? 0) + n);
    for (const [reason, count] of this.#pending) {
      const last = this.#last.get(reason);
      if (last !== undefined && nowMs - last < WARN_EVERY_MS) continue;
      this.#last.set(reason, nowMs);
      this.#pending.delete(reason);
      logger?.warn(WARNING[reason], { reason, count, ...(reason === "conns_full" ? fields : {}) });
    }
  }
}
