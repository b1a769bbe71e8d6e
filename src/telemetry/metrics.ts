/**
 * The agent's metric catalogue (the spec's list, under `<prometheus_namespace>_`), in an injected
 * prom-client Registry (never the global one). Components receive `AgentMetrics` and update it where
 * the event happens; nothing here is a constant or a once-per-interval guess.
 */
// By module, not through the package's index (see prom-client-lib.d.ts).
import Counter from "prom-client/lib/counter";
import Gauge from "prom-client/lib/gauge";
import Histogram from "prom-client/lib/histogram";
import Registry from "prom-client/lib/registry";
import { exposition, expositionBytes } from "./exposition";
import { sampleProcess } from "./process-metrics";
import type { TaskRegistry } from "./tasks";

export const EXPORT_SIGNALS = ["traces", "metrics", "logs", "profiles"] as const;
/** Why collector/logs cut a record short (logs_truncated_total's reason). */
export const LOG_TRUNCATION_REASONS = ["max_line_size", "max_lines", "max_bytes"] as const;
/** `mem_limit`: a queue's own byte bound (queues.<signal>.mem_limit); `memory_limit`: the agent above its memory soft limit (agent.memory_limit). */
export const DROP_REASONS = ["queue_full", "mem_limit", "permanent_error", "partial_success", "shutdown", "disk_full", "memory_limit"] as const;
/** Span drops before the pipeline: over agent.ebpf.network.max_spans_per_second (the kernel's or user space's budget). */
export const SPAN_RATE_LIMIT_REASON = "rate_limit";
/** Span drops of HTTP exchanges lost after capture: a message head that did not parse, a request never answered. */
export const SPAN_HTTP_UNPARSED_REASON = "http_unparsed";
export const SPAN_HTTP_UNANSWERED_REASON = "http_unanswered";
/** HTTP/2 connection directions that stopped decoding (bytes missing, or over a bound): their later streams are lost. */
export const SPAN_HTTP2_STATE_LOST_REASON = "http2_state_lost";
/**
 * What the network and TLS program sets saw but could not account for, by reason: `conns_full`, a socket call
 * (connect, accept, read, write) on a connection the connection table had no room for (max_connections), not traced
 * and its requests not counted; `pending_full`, a call whose buffer could not be remembered (http_capture: syscalls),
 * not captured; `red_replaced`, an HTTP/1.x request not counted in the RED metrics because the next request on its
 * connection started before its response (pipelining).
 */
export const NETWORK_DROP_REASONS = ["conns_full", "pending_full", "red_replaced"] as const;
export type NetworkDropReason = (typeof NETWORK_DROP_REASONS)[number];

/** Drop reasons of spans only, beside DROP_REASONS. */
const SPAN_DROP_REASONS = [SPAN_RATE_LIMIT_REASON, SPAN_HTTP_UNPARSED_REASON, SPAN_HTTP_UNANSWERED_REASON, SPAN_HTTP2_STATE_LOST_REASON] as const;
/** The `code` values of export_errors_total: gRPC status code names other than OK. */
export const EXPORT_ERROR_CODES = [
  "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
  "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
] as const;

const LATENCY_BUCKETS_SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const BATCH_SIZE_BUCKETS = [1, 8, 32, 128, 256, 512, 1024, 2048, 4096, 8192];

export interface SignalCounters {
  collected: Counter;
  exported: Counter;
  dropped: Counter<"reason">;
}

export class AgentMetrics {
  /** The metric store; render it with `exposition()` (src/telemetry/exposition.ts). */
  readonly registry: Registry;
  #namespace: string;
  readonly spans: SignalCounters;
  readonly metrics: SignalCounters;
  readonly logs: SignalCounters;
  readonly profiles: SignalCounters;
  /** Log records cut short by collector/logs, by reason (max_line_size, max_lines, max_bytes). */
  readonly logsTruncated: Counter<"reason">;
  readonly ebpfProgramsLoaded: Gauge;
  readonly ebpfMapEntries: Gauge<"map">;
  readonly ebpfRingbufEvents: Counter<"ringbuf">;
  readonly ebpfRingbufLost: Counter<"ringbuf">;
  readonly ebpfPerfEvents: Counter<"buffer">;
  readonly ebpfPerfLost: Counter<"buffer">;
  /** System calls the `syscalls` program set could not count, by reason (stats_full, inflight_full). */
  readonly syscallsDropped: Counter<"reason">;
  /** Calls and requests the network and TLS sets could not account for, by reason (NETWORK_DROP_REASONS). */
  readonly networkDropped: Counter<"reason">;
  /** HTTP/2 connections the network and TLS sets found in their middle (decoded from there, HPACK tables partial). */
  readonly http2Midstream: Counter;
  readonly http2Resumed: Counter;
  readonly exportRequests: Counter<"signal">;
  readonly exportErrors: Counter<"signal" | "code">;
  readonly exportRetries: Counter<"signal">;
  readonly exportLatency: Histogram<"signal">;
  readonly exportBatchSize: Histogram<"signal">;
  readonly exportQueueSize: Gauge<"signal">;

  constructor(namespace: string, tasks: TaskRegistry) {
    this.registry = new Registry();
    this.#namespace = namespace;
    const n = (suffix: string) => `${namespace}_${suffix}`;
    const registers = [this.registry];
    const signal = (plural: string, noun: string): SignalCounters => ({
      collected: new Counter({ name: n(`${plural}_collected_total`), help: `Total ${noun} collected.`, registers }),
      exported: new Counter({ name: n(`${plural}_exported_total`), help: `${cap(noun)} exported successfully.`, registers }),
      dropped: new Counter({
        name: n(`${plural}_dropped_total`),
        help: `${cap(noun)} dropped, by reason (${[...DROP_REASONS, ...(plural === "spans" ? SPAN_DROP_REASONS : [])].join(", ")}).`,
        labelNames: ["reason"],
        registers,
      }),
    });
    this.spans = signal("spans", "spans");
    this.metrics = signal("metrics", "metric data points");
    this.logs = signal("logs", "log records");
    this.profiles = signal("profiles", "profiles");
    /** A counter by `reason`, each of `reasons` shown from the start (at 0). */
    const byReason = (suffix: string, help: string, reasons: readonly string[]): Counter<"reason"> => {
      const c = new Counter({ name: n(suffix), help, labelNames: ["reason"], registers });
      for (const reason of reasons) c.inc({ reason }, 0);
      return c;
    };
    this.logsTruncated = byReason(
      "logs_truncated_total",
      "Log records cut short when read, by reason (max_line_size: a line cut; max_lines, max_bytes: lines of a multiline record dropped).",
      LOG_TRUNCATION_REASONS,
    );

    this.ebpfProgramsLoaded = new Gauge({ name: n("ebpf_programs_loaded"), help: "Number of eBPF programs loaded.", registers });
    this.ebpfMapEntries = new Gauge({ name: n("ebpf_map_entries"), help: "Entries in eBPF maps.", labelNames: ["map"], registers });
    this.ebpfRingbufEvents = new Counter({ name: n("ebpf_ringbuf_events_total"), help: "Ring buffer events received.", labelNames: ["ringbuf"], registers });
    this.ebpfRingbufLost = new Counter({ name: n("ebpf_ringbuf_lost_total"), help: "Ring buffer events lost (failed reservations in the kernel).", labelNames: ["ringbuf"], registers });
    this.ebpfPerfEvents = new Counter({ name: n("ebpf_perf_events_total"), help: "Perf buffer events received.", labelNames: ["buffer"], registers });
    this.ebpfPerfLost = new Counter({ name: n("ebpf_perf_lost_total"), help: "Perf buffer events lost.", labelNames: ["buffer"], registers });

    this.syscallsDropped = byReason(
      "ebpf_syscalls_dropped_total",
      "System calls not counted by the syscalls program set, by reason (stats_full: the statistics map is full; inflight_full: the in-flight map is full).",
      ["stats_full", "inflight_full"],
    );
    this.networkDropped = byReason(
      "ebpf_network_dropped_total",
      "What the network and TLS program sets could not account for, by reason (conns_full: socket calls on connections over max_connections, not traced and their requests not counted; pending_full: calls not captured, the in-flight map of http_capture syscalls full; red_replaced: HTTP/1.x requests not counted in the RED metrics, the next request on the connection started before their response).",
      NETWORK_DROP_REASONS,
    );
    this.http2Midstream = new Counter({
      name: n("ebpf_http2_midstream_total"),
      help: "HTTP/2 connections (cleartext, or TLS plaintext) first seen in their middle (open before the programs loaded: an agent restart, a reload of the network set), decoded from their next frame on with partial HPACK tables.",
      registers,
    });
    this.http2Resumed = new Counter({
      name: n("ebpf_http2_resumed_total"),
      help: "HTTP/2 connections (cleartext, or TLS plaintext) whose forwarding the kernel had stopped (http2_records_per_second, or the ring three quarters full) forwarded again once the ring was under a quarter full and the budget had room, decoded anew from their next frame on with partial HPACK tables.",
      registers,
    });

    this.exportRequests = new Counter({ name: n("export_requests_total"), help: "Export requests sent to the backend.", labelNames: ["signal"], registers });
    this.exportErrors = new Counter({
      name: n("export_errors_total"),
      help: "Export requests that failed, by gRPC status code name (OTLP/HTTP: the code of the same meaning as the HTTP status).",
      labelNames: ["signal", "code"],
      registers,
    });
    this.exportRetries = new Counter({ name: n("export_retries_total"), help: "Export attempts that were retries of a batch (after a retryable outcome).", labelNames: ["signal"], registers });
    this.exportLatency = new Histogram({ name: n("export_latency_seconds"), help: "Export request latency, measured from send to answer.", labelNames: ["signal"], buckets: LATENCY_BUCKETS_SECONDS, registers });
    this.exportBatchSize = new Histogram({ name: n("export_batch_size"), help: "Items per export request.", labelNames: ["signal"], buckets: BATCH_SIZE_BUCKETS, registers });
    this.exportQueueSize = new Gauge({ name: n("export_queue_size"), help: "Items currently queued for export.", labelNames: ["signal"], registers });
    // Every series with known label values exists from the start at 0, so that queries and alerts see 0, not no data.
    for (const s of EXPORT_SIGNALS) {
      const counters = this.signal(s);
      for (const reason of DROP_REASONS) counters.dropped.inc({ reason }, 0);
      if (s === "traces") for (const reason of SPAN_DROP_REASONS) counters.dropped.inc({ reason }, 0);
      this.exportRequests.inc({ signal: s }, 0);
      this.exportRetries.inc({ signal: s }, 0);
      for (const code of EXPORT_ERROR_CODES) this.exportErrors.inc({ signal: s, code }, 0);
      this.exportLatency.zero({ signal: s });
      this.exportBatchSize.zero({ signal: s });
      this.exportQueueSize.set({ signal: s }, 0);
    }

    let sample = sampleProcess();
    // One /proc read per scrape, shared by the three process gauges (the first collect refreshes it).
    new Counter({
      name: n("process_cpu_seconds_total"),
      help: "User and system CPU time used by the agent, in seconds.",
      registers,
      collect() {
        sample = sampleProcess();
        this.reset();
        this.inc(sample.cpuSeconds);
      },
    });
    new Gauge({
      name: n("process_resident_memory_bytes"),
      help: "Resident memory of the agent in bytes.",
      registers,
      collect() {
        this.set(sample.residentBytes);
      },
    });
    new Gauge({
      name: n("process_open_fds"),
      help: "Open file descriptors of the agent (re-counted at most once per second).",
      registers,
      collect() {
        this.set(sample.openFds);
      },
    });
    new Gauge({
      name: n("go_goroutines"),
      help: "Concurrent execution units of the agent: the event loop, its long-running tasks and in-flight operations.",
      registers,
      collect() {
        this.set(tasks.count());
      },
    });
  }

  /** The prefix of every metric name (`self_telemetry.prometheus_namespace`). */
  get namespace(): string {
    return this.#namespace;
  }

  /**
   * Renames every metric to the new prefix, keeping its values (a reload that changes
   * `self_telemetry.prometheus_namespace`). prom-client derives sample names from `metric.name` at scrape time.
   */
  setNamespace(namespace: string): void {
    if (namespace === this.#namespace) return;
    const old = this.#namespace;
    const metrics = this.registry.getMetricsAsArray() as unknown as Array<{ name: string }>;
    this.registry.clear();
    for (const m of metrics) {
      m.name = namespace + m.name.slice(old.length);
      this.registry.registerMetric(m as never);
    }
    this.#namespace = namespace;
  }

  /** The text exposition: Prometheus 0.0.4, or OpenMetrics 1.0.0 when `openMetrics`. */
  render(openMetrics = false): Promise<string> {
    return exposition(this.registry, openMetrics);
  }

  /** The same exposition as UTF-8 bytes (what the metrics endpoint sends). */
  renderBytes(openMetrics = false): Promise<Uint8Array<ArrayBuffer>> {
    return expositionBytes(this.registry, openMetrics);
  }

  /** The counters of one export signal. */
  signal(s: (typeof EXPORT_SIGNALS)[number]): SignalCounters {
    return s === "traces" ? this.spans : s === "metrics" ? this.metrics : s === "logs" ? this.logs : this.profiles;
  }
}

function cap(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}
