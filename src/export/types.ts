/**
 * The contract between whatever collects telemetry and the export pipeline.
 * Collectors hand items to `TelemetryPipeline.submit`; the pipeline queues, batches, retries and exports
 * them over OTLP/gRPC and accounts for every item exactly.
 */
import type { Signal } from "./config";

export type AttributeValue = string | number | boolean | string[] | number[];
export type Attributes = Record<string, AttributeValue>;

/** Why items were dropped (the `reason` label of `<ns>_<signal>_dropped_total`). */
export type DropReason = "queue_full" | "mem_limit" | "permanent_error" | "partial_success" | "shutdown" | "disk_full" | "memory_limit";

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

/** Why a flush ended with items still pending. */
export type FlushShortfall =
  /** Every pending batch was tried after the flush began and failed again (the backend is down or refusing). */
  | "export_failed"
  /** The timeout passed while items were still queued or being sent. */
  | "timeout"
  /** The exporter is not running (not started yet, or shutting down). */
  | "not_running";

/** What one flush came to. */
export interface FlushResult {
  /** Items exported while the flush ran, per signal. */
  exported: Record<Signal, number>;
  /** Items dropped for good while it ran (permanent errors, partial success), per signal. */
  dropped: Record<Signal, number>;
  /** Items still queued or being sent when it ended, per signal. */
  remaining: Record<Signal, number>;
  /** Why items remain; undefined when none do. */
  reason?: FlushShortfall;
  /** The last export error of a batch still pending (`CODE: message`), when there is one. */
  lastError?: string;
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
  /**
   * Pulls what the flush sources hold into the queues, tries every queued and retrying item at once (cutting
   * backoff waits short), and waits until nothing is pending, every pending batch has failed again since the
   * flush began, or `timeoutMs` passed. Resolves with what was exported, what remains and why.
   */
  flush(timeoutMs: number): Promise<FlushResult>;
  /**
   * Registers `pull`, called at the start of every flush to submit what a collector aggregates between its own
   * exports (delta metrics). Returns the function that unregisters it. Optional (additive).
   */
  addFlushSource?(pull: () => void): () => void;
  /** Sets (replaces) the resource attributes contributed by `source` (e.g. "discovery/cloud"); they go on every export. */
  setResourceAttributes(source: string, attributes: Attributes): void;
  /**
   * The exact counts of every signal now (synchronous, cheap; safe at any time). Optional so that test fakes
   * need not implement it; the real pipeline always does.
   */
  accounting?(): Record<Signal, SignalAccounting>;
}
