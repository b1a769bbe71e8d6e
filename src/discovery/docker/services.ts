/**
 * discovered_services from Docker (without Kubernetes): running containers grouped by compose service
 * (namespace = compose project) or else by image (namespace "docker"), with their published ports.
 */
import { byNamespaceThenName, type DiscoveredService } from "../plugin";
import { COMPOSE_PROJECT_LABEL, COMPOSE_SERVICE_LABEL, splitImage, type DockerContainer } from "./containers";

export function dockerServices(containers: Iterable<DockerContainer>): DiscoveredService[] {
  const groups = new Map<string, { name: string; namespace: string; instances: number; ports: Set<number> }>();
  for (const c of containers) {
    const compose = c.labels[COMPOSE_SERVICE_LABEL];
    const name = compose ?? splitImage(c.image).name;
    const namespace = compose ? (c.labels[COMPOSE_PROJECT_LABEL] ?? "docker") : "docker";
    const key = `${namespace}\u0000${name}`;
    let g = groups.get(key);
    if (!g) groups.set(key, (g = { name, namespace, instances: 0, ports: new Set() }));
    g.instances++;
    for (const p of c.publishedPorts) g.ports.add(p);
  }
  return [...groups.values()].map((g) => ({ name: g.name, namespace: g.namespace, instances: g.instances, ports: [...g.ports].sort((a, b) => a - b) })).sort(byNamespaceThenName);
}
