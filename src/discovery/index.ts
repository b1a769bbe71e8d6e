/**
 * Workload discovery: Docker (Engine API), Kubernetes (this node's pods and the services, list+watch) and
 * the cloud instance (metadata services, only when local hints or the configuration say so). It feeds the
 * workload directory (container.*, k8s.*) behind the workload registry (src/workloads) that gives every signal
 * about a process its workload's resource, the host attributes of every export (cloud.*, host.*,
 * k8s.node.name), the `discovery` status view and readiness check.
 */
import type { BaseContext } from "../lifecycle/context";
import type { TelemetryPipeline } from "../export/types";
import type { Component } from "../lifecycle/component";
import { VIEWS } from "../status/model";
import { CloudSource } from "./cloud/source";
import { ContainerDirectory, type DirectoryOptions } from "./directory";
import { WorkloadRegistry } from "../workloads/registry";
import { DockerSource } from "./docker/source";
import { KubernetesSource } from "./kubernetes/source";
import type { WorkloadDirectory } from "./types";
import { createDiscoverySummary, createDiscoveryView } from "./view";

export type { WorkloadDirectory } from "./types";

export interface DiscoverySubsystem {
  workloads: WorkloadDirectory;
  components: Component[];
}

/** The subsystem with its parts exposed (tests and benchmarks reach the sources directly). */
export interface DiscoveryParts extends DiscoverySubsystem {
  /** The workload registry (`workloads`): resources of processes from the directory, the process table and their environment. */
  workloads: WorkloadRegistry;
  directory: ContainerDirectory;
  docker: DockerSource;
  kubernetes: KubernetesSource;
  cloud: CloudSource;
  view: ReturnType<typeof createDiscoveryView>;
}

/** Builds the discovery sources (components `discovery/docker`, `discovery/kubernetes`, `discovery/cloud`) and publishes the `discovery` view. */
export function createDiscovery(ctx: BaseContext & { pipeline: TelemetryPipeline }, options: DirectoryOptions & { selfPid?: number } = {}): DiscoveryParts {
  const directory = new ContainerDirectory(options);
  const workloads = new WorkloadRegistry(directory, { procRoot: options.procRoot, selfPid: options.selfPid, now: options.now });
  const docker = new DockerSource(ctx.config, directory, ctx.tasks);
  const kubernetes = new KubernetesSource(ctx.config, ctx.env, directory, ctx.pipeline, ctx.tasks);
  const cloud = new CloudSource(ctx.config, ctx.pipeline, ctx.tasks);
  const view = createDiscoveryView({ docker, kubernetes, cloud });
  ctx.status.provide(VIEWS.discovery, view, createDiscoverySummary({ docker, kubernetes, cloud }));
  return { workloads, components: [cloud, kubernetes, docker], directory, docker, kubernetes, cloud, view };
}
