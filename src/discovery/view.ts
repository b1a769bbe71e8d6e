/**
 * The combined `discovery` status view (DiscoveryViewSchema): Kubernetes, Docker and cloud state and the
 * discovered services. Derived lists are cached by the sources' generations, so repeated requests cost
 * only the small object assembly.
 */
import type { DiscoveryView } from "../status/model";
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
  let cacheKey = "";
  let cached: DiscoveredService[] = [];
  return () => {
    const k = sources.kubernetes.snapshot();
    const d = sources.docker.snapshot();
    const key = `${k.enabled}:${sources.kubernetes.generation}:${d.enabled}:${sources.docker.generation}`;
    if (key !== cacheKey) {
      cached = k.enabled ? kubernetesServices(k.services.values(), k.pods.values()) : dockerServices(d.containers);
      cacheKey = key;
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
      docker: { enabled: d.enabled, connected: d.connected, containers: d.containers.length },
      cloud: sources.cloud.snapshot(),
      discovered_services: cached.map((s) => ({ ...s, ports: [...s.ports] })),
    };
  };
}
