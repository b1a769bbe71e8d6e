/** The metric suffixes of the spec's catalogue (/work/shared/spec/self-telemetry-api.md, "Metrics catalogue"), in its order. */
export const SPEC_CATALOGUE = [
  "spans_collected_total", "spans_exported_total", "spans_dropped_total", "metrics_collected_total", "metrics_exported_total",
  "logs_collected_total", "logs_exported_total", "profiles_collected_total", "ebpf_programs_loaded", "ebpf_map_entries",
  "ebpf_ringbuf_events_total", "ebpf_ringbuf_lost_total", "ebpf_perf_events_total", "ebpf_perf_lost_total", "export_requests_total",
  "export_errors_total", "export_latency_seconds", "export_batch_size", "export_queue_size", "process_cpu_seconds_total",
  "process_resident_memory_bytes", "process_open_fds", "go_goroutines",
] as const;
