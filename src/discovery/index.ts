/** Workload discovery: Docker, Kubernetes, cloud instance; status view `discovery`, readiness `discovery`. */
import type { BaseContext } from "../agent/context";
import type { TelemetryPipeline } from "../export/types";
import type { Component } from "../lifecycle/component";
import type { WorkloadDirectory } from "./types";

export type { WorkloadDirectory } from "./types";

export interface DiscoverySubsystem {
  workloads: WorkloadDirectory;
  components: Component[];
}

/** Builds the discovery sources. (Being written: until then nothing is discovered.) */
export function createDiscovery(_ctx: BaseContext & { pipeline: TelemetryPipeline }): DiscoverySubsystem {
  return { workloads: { forContainer: () => undefined, forPid: () => undefined }, components: [] };
}
