/** What a collector is given: the agent's base context plus the services the subsystems below offer it. */
import type { WorkloadDirectory } from "../discovery/types";
import type { EbpfCore } from "../ebpf/core";
import type { TelemetryPipeline } from "../export/types";
import type { BaseContext } from "../lifecycle/context";

export interface AgentContext extends BaseContext {
  /** Where collectors submit spans, metrics, logs and profiles (built by src/export). */
  readonly pipeline: TelemetryPipeline;
  /** Workload metadata for labelling (built by src/discovery). */
  readonly workloads: WorkloadDirectory;
  /** The eBPF core of this agent: runtime, process table, poll ticker, the `ebpf` view (built by src/ebpf). */
  readonly ebpf: EbpfCore;
}
