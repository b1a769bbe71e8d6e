/**
 * Workload discovery: the sources registered in sources.ts (Docker Engine API, Kubernetes list+watch of this
 * node's pods and the services, the cloud instance's metadata, only when local hints or the configuration say
 * so). It feeds the container directory (container.*, k8s.*) behind the workload registry (src/workloads) that
 * gives every signal about a process its workload's resource, the host attributes of every export (cloud.*,
 * host.*, k8s.node.name), the `discovery` status view and readiness check.
 */
import type { BaseContext } from "../lifecycle/context";
import type { TelemetryPipeline } from "../export/types";
import type { Component } from "../lifecycle/component";
import { DISCOVERY_STATUS } from "./status";
import { ContainerDirectory, type DirectoryOptions } from "./directory";
import type { SourceDeps } from "./plugin";
import { SOURCES } from "./sources";
import { createDiscoverySummary, createDiscoveryView, type BuiltSources } from "./view";

export type { WorkloadDirectory } from "./types";
export type { BuiltSources } from "./view";

export interface DiscoverySubsystem {
  /** What the sources found, by container id and pid: the workload registry (src/workloads) reads it. */
  directory: ContainerDirectory;
  components: Component[];
}

/** The subsystem with its parts exposed (tests and benchmarks reach the sources directly). */
export interface DiscoveryParts extends DiscoverySubsystem {
  sources: BuiltSources;
  view: ReturnType<typeof createDiscoveryView>;
}

/** Builds the registered sources (components `discovery/<source>`) and publishes the `discovery` view. */
export function createDiscovery(ctx: BaseContext & { pipeline: TelemetryPipeline }, options: DirectoryOptions = {}): DiscoveryParts {
  const directory = new ContainerDirectory(options);
  const deps: SourceDeps = { env: ctx.env, tasks: ctx.tasks, pipeline: ctx.pipeline, directory };
  const sources = Object.fromEntries(SOURCES.map((p) => [p.key, p.create(ctx.config.agent.discovery as never, deps)])) as BuiltSources;
  const view = createDiscoveryView(sources);
  ctx.status.provide(DISCOVERY_STATUS.name, view, createDiscoverySummary(sources));
  const order = [...SOURCES.filter((p) => "startsFirst" in p && p.startsFirst), ...SOURCES.filter((p) => !("startsFirst" in p && p.startsFirst))];
  return { components: order.map((p) => sources[p.key] as Component), directory, sources, view };
}
