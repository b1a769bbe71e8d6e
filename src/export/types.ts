/**
 * The contract between whatever collects telemetry and the export pipeline.
 * Collectors hand items to `TelemetryPipeline.submit`; the pipeline queues, batches, retries and exports
 * them over OTLP/gRPC and accounts for every item exactly.
 */
import type { Signal } from "./config";

export type AttributeValue = string | number | boolean | string[] | number[];
export type Attributes = Record<string, AttributeValue>;

/** Why items were dropped (the `reason` label of `<ns>_<signal>_dropped_total`). */
export type DropReason = "queue_full" | "mem_limit" | "permanent_error" | "partial_success" | "shutdown" | "disk_full";

/** The counts of one signal at one instant: `collected = exported + droppedTotal + queued + inFlight` always holds. */
export interface SignalAccounting {
  collected: number;
  exported: number;
  dropped: Record<DropReason, number>;
  /** Sum of `dropped`. */
  droppedTotal: number;
  queued: number;
  /** Encoded bytes queued (what `mem_limit` bounds). */
  queuedBytes: number;
  /** Items in batches being sent or waiting to be retried. */
  inFlight: number;
}

export interface TelemetryPipeline {
  /**
   * Offers items of one signal for export. Items that do not fit (queue capacity, mem_limit) are dropped
   * and counted with their reason. Returns how many were accepted. Never throws; callable at any time,
   * including before start and after shutdown (then everything is dropped as `shutdown`).
   */
  submit(signal: Signal, items: readonly unknown[]): number;
  /**
   * How many more items of `signal` submit() would accept now (queue capacity left; mem_limit may still refuse
   * some). Lets a producer that can wait (the log tailer) pause instead of having items dropped. Optional (additive).
   */
  room?(signal: Signal): number;
  /**
   * Offers items from a producer that keeps what is refused and offers it again later (the log tailer): queues
   * the longest prefix that fits now and returns its length. Only that prefix is counted (collected, and
   * dropped for an item that can never be queued: not encodable, or larger than mem_limit alone); the refused
   * rest is not counted at all, so that offering it again counts each item once. After shutdown: 0, nothing
   * counted. Optional (additive): without it, producers use submit (which counts and drops what is refused).
   */
  offer?(signal: Signal, items: readonly unknown[]): number;
  /** Exports everything queued now, bounded by `timeoutMs`; resolves with the items exported per signal. */
  flush(timeoutMs: number): Promise<Record<Signal, number>>;
  /** Sets (replaces) the resource attributes contributed by `source` (e.g. "discovery/cloud"); they go on every export. */
  setResourceAttributes(source: string, attributes: Attributes): void;
  /**
   * The exact counts of every signal now (synchronous, cheap; safe at any time). Optional so that test fakes
   * need not implement it; the real pipeline always does.
   */
  accounting?(): Record<Signal, SignalAccounting>;
}
