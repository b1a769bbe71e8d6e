/** The agent's own telemetry: the Prometheus metric catalogue, cheap process collectors, and the task registry. */
export { AgentMetrics, EXPORT_SIGNALS, DROP_REASONS, type SignalCounters } from "./metrics";
export { TaskRegistry, type TaskInfo } from "./tasks";
export { sampleProcess } from "./process-metrics";
