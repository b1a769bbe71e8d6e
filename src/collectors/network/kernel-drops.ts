/**
 * The span drops an HTTP capture set (network, tls) counts in its per-CPU stats array: exchanges the kernel did not
 * capture (over the per-second budget, or the ring half full) are rate_limit drops; an HTTP/2 connection whose
 * forwarding stopped because a record was lost in a full ring (no record tells user space) is two http2_state_lost
 * drops, one per direction, as user space counts the directions it finds undecodable. Read each second; what is
 * counted is the increase since the last read.
 */
import { SPAN_HTTP2_STATE_LOST_REASON, SPAN_RATE_LIMIT_REASON } from "../../telemetry/metrics";

/** The per-CPU stats array of a loaded set. */
interface PerCpuCounters {
  sumPerCpuU64(key: number): bigint;
}

/** The span drops counter (svc_spans_dropped_total). */
interface DropCounter {
  inc(labels: { reason: string }, value: number): void;
}

export class KernelSpanDrops {
  #sampledOut = 0n;
  #h2Lost = 0n;

  /** `sampledOutIndex`, `h2LostIndex`: the set's STAT_* indexes of the two counts. */
  constructor(
    private readonly sampledOutIndex: number,
    private readonly h2LostIndex: number,
  ) {}

  /** A set just attached: its counters start at 0. */
  reset(): void {
    this.#sampledOut = 0n;
    this.#h2Lost = 0n;
  }

  /** Counts the increases since the last read into `dropped`; returns the exchanges newly refused their capture. */
  take(stats: PerCpuCounters, dropped: DropCounter): number {
    const sampledOut = stats.sumPerCpuU64(this.sampledOutIndex);
    const refused = Number(sampledOut - this.#sampledOut);
    this.#sampledOut = sampledOut;
    if (refused > 0) dropped.inc({ reason: SPAN_RATE_LIMIT_REASON }, refused);
    const h2Lost = stats.sumPerCpuU64(this.h2LostIndex);
    const lost = Number(h2Lost - this.#h2Lost);
    this.#h2Lost = h2Lost;
    if (lost > 0) dropped.inc({ reason: SPAN_HTTP2_STATE_LOST_REASON }, 2 * lost);
    return Math.max(0, refused);
  }
}
