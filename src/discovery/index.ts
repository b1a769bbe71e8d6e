/**
 * Workload discovery: Docker (Engine API), Kubernetes (this node's pods and the services, list+watch) and
 * the cloud instance (metadata services, only when local hints or the configuration say so). It feeds the
 * container directory (container.*, k8s.*) behind the workload registry (src/workloads) that gives every signal
 * about a process its workload's resource, the host attributes of every export (cloud.*, host.*,
 * k8s.node.name), the `discovery` status view and readiness check.
 */
import type { BaseContext } from "../lifecycle/context";
import type { TelemetryPipeline } from "../export/types";
import type { Component } from "../lifecycle/component";
import { DISCOVERY_STATUS } from "./status";
import { CloudSource } from "./cloud/source";
import { ContainerDirectory, type DirectoryOptions } from "./directory";
import { DockerSource } from "./docker/source";
import { KubernetesSource } from "./kubernetes/source";
import { createDiscoverySummary, createDiscoveryView } from "./view";

export type { WorkloadDirectory } from "./types";

export interface DiscoverySubsystem {
  /** What the sources found, by container id and pid: the workload registry (src/workloads) reads it. */
  directory: ContainerDirectory;
  components: Component[];
}

/** The subsystem with its parts exposed (tests and benchmarks reach the sources directly). */
export interface DiscoveryParts extends DiscoverySubsystem {
  docker: DockerSource;
  kubernetes: KubernetesSource;
  cloud: CloudSource;
  view: ReturnType<typeof createDiscoveryView>;
}

/** Builds the discovery sources (components `discovery/docker`, `discovery/kubernetes`, `discovery/cloud`) and publishes the `discovery` view. */
export function createDiscovery(ctx: BaseContext & { pipeline: TelemetryPipeline }, options: DirectoryOptions = {}): DiscoveryParts {
  const directory = new ContainerDirectory(options);
  const docker = new DockerSource(ctx.config, directory, ctx.tasks);
  const kubernetes = new KubernetesSource(ctx.config, ctx.env, directory, ctx.pipeline, ctx.tasks);
  const cloud = new CloudSource(ctx.config, ctx.pipeline, ctx.tasks);
  const view = createDiscoveryView({ docker, kubernetes, cloud });
  ctx.status.provide(DISCOVERY_STATUS.name, view, createDiscoverySummary({ docker, kubernetes, cloud }));
  return { components: [cloud, kubernetes, docker], directory, docker, kubernetes, cloud, view };
}
