/**
 * The contract between discovery and everything that labels telemetry with workload metadata.
 * Collectors ask for the resource of a process (`forPid`: its workload identity, src/workloads) or what discovery
 * knows of a container (`forContainer`: container.*, k8s.*).
 */
import type { ProcessTable } from "../ebpf/process-table";
import type { Attributes } from "../export/types";

export interface WorkloadDirectory {
  /** Attributes of a container by its full id (docker name/image, k8s pod/namespace/...), or undefined. O(1), synchronous. */
  forContainer(containerId: string): Attributes | undefined;
  /**
   * The resource of telemetry about a process: its workload identity (service.*, process.*, container.*, k8s.*),
   * the same object while nothing about it changes; undefined for the agent's own process. Synchronous, cached.
   */
  forPid(pid: number): Attributes | undefined;
  /** The resource of a container's telemetry not tied to a process (log files), `extra` being what else is known (the file path's attributes). */
  resourceOfContainer?(containerId: string, extra?: Attributes): Attributes;
  /** Resolves processes through this table (the eBPF core's, fed by exec/fork/exit events). Idempotent. */
  attachProcesses?(table: ProcessTable): void;
  /** Drops what the pid cache remembers of a process (call it when the process exits, so a reused pid is looked up again). Idempotent. */
  forgetPid?(pid: number): void;
  /** Name of the service listening at a container or pod address (any port of it), or undefined when discovery does not know the address. Synchronous. */
  serviceAt?(address: string, port: number): string | undefined;
}
