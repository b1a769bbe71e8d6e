/**
 * The combined `discovery` status view (DiscoveryViewSchema): Kubernetes, Docker and cloud state and the
 * discovered services. Derived lists are cached (frozen) by the sources' generations, so repeated requests cost
 * only the small object assembly; /status reads the summary, from the sources' counts.
 */
import type { DiscoverySummary, DiscoveryView } from "./status";
import type { CloudSource } from "./cloud/source";
import type { DockerSource } from "./docker/source";
import type { KubernetesSource } from "./kubernetes/source";
import { dockerServices, kubernetesServices, type DiscoveredService } from "./services";

/** The sources the view reads (each read synchronously at request time). */
export interface ViewSources {
  /** Docker containers and connection state. */
  docker: DockerSource;
  /** Pods, services and connection state. */
  kubernetes: KubernetesSource;
  /** The cloud identity. */
  cloud: CloudSource;
}

export function createDiscoveryView(sources: ViewSources): () => DiscoveryView {
  let kEnabled: boolean | undefined;
  let kGeneration = -1;
  let dEnabled: boolean | undefined;
  let dGeneration = -1;
  // Frozen, so the same list can go into every answer until a source changes.
  let cached: readonly DiscoveredService[] = Object.freeze([]);
  return () => {
    const k = sources.kubernetes.snapshot();
    const docker = sources.docker;
    const dockerEnabled = docker.enabled;
    if (k.enabled !== kEnabled || sources.kubernetes.generation !== kGeneration || dockerEnabled !== dEnabled || docker.generation !== dGeneration) {
      const list = k.enabled ? kubernetesServices(k.services.values(), k.pods.values()) : dockerServices(docker.snapshot().containers);
      for (const s of list) Object.freeze(Object.freeze(s).ports);
      cached = Object.freeze(list);
      kEnabled = k.enabled;
      kGeneration = sources.kubernetes.generation;
      dEnabled = dockerEnabled;
      dGeneration = docker.generation;
    }
    return {
      kubernetes: {
        enabled: k.enabled,
        connected: k.connected,
        cluster: k.cluster,
        namespace: k.namespace,
        pods_watched: k.pods.size,
        services_watched: k.services.size,
      },
      docker: { enabled: dockerEnabled, connected: docker.connected, containers: docker.containerCount },
      cloud: sources.cloud.snapshot(),
      discovered_services: cached as DiscoveredService[],
    };
  };
}

/** What /status shows of the discovery view (same values), from the sources' counts: no list built or copied. */
export function createDiscoverySummary(sources: ViewSources): () => DiscoverySummary {
  return () => {
    const k = sources.kubernetes;
    const d = sources.docker;
    return {
      kubernetes: k.enabled && k.connected,
      docker: d.enabled && d.connected,
      pods_discovered: k.podCount,
      containers_discovered: d.containerCount,
    };
  };
}
