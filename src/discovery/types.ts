/**
 * The contract between discovery and everything that labels telemetry with workload metadata.
 * Collectors ask the directory for the attributes of a container or process (container.*, k8s.*).
 */
import type { Attributes } from "../export/types";

export interface WorkloadDirectory {
  /** Attributes of a container by its full id (docker name/image, k8s pod/namespace/...), or undefined. O(1), synchronous. */
  forContainer(containerId: string): Attributes | undefined;
  /** Attributes of a process (via its container, when discovery knows it), or undefined. Synchronous, cached. */
  forPid(pid: number): Attributes | undefined;
  /** Drops what the pid cache remembers of a process (call it when the process exits, so a reused pid is looked up again). Idempotent. */
  forgetPid?(pid: number): void;
  /** Name of the service listening at a container or pod address (any port of it), or undefined when discovery does not know the address. Synchronous. */
  serviceAt?(address: string, port: number): string | undefined;
}
