/**
 * discovered_services: from Kubernetes services (instances = ready pods of this node that match the
 * selector; ports = the service ports) or, without Kubernetes, from running Docker containers grouped by
 * compose service (namespace = compose project) or else by image (namespace "docker"), with published ports.
 */
import type { DockerContainer } from "./docker/containers";
import { COMPOSE_PROJECT_LABEL, COMPOSE_SERVICE_LABEL, splitImage } from "./docker/containers";
import { objectKey, podReady, type Pod, type Service } from "./kubernetes/pods";

/** One item of discovered_services (DiscoveredServiceSchema). */
export interface DiscoveredService {
  /** Service name, compose service, or image name. */
  name: string;
  /** Kubernetes namespace, compose project, or "docker". */
  namespace: string;
  /** Ready pods on this node matching the selector, or running containers of the group. */
  instances: number;
  /** Service ports, or published host ports; sorted, unique. */
  ports: number[];
}

const byNamespaceThenName = (a: DiscoveredService, b: DiscoveredService) => a.namespace.localeCompare(b.namespace) || a.name.localeCompare(b.name);

/** Ready pods indexed by namespace and `label=value`, so matching a selector reads the smallest posting list. */
class ReadyPodIndex {
  readonly #byLabel = new Map<string, Set<string>>();
  readonly #labels = new Map<string, Record<string, string>>();

  constructor(pods: Iterable<Pod>) {
    for (const p of pods) {
      if (!podReady(p)) continue;
      const key = objectKey(p);
      const ns = p.metadata?.namespace ?? "";
      const labels = p.metadata?.labels ?? {};
      this.#labels.set(key, labels);
      for (const [k, v] of Object.entries(labels)) {
        const posting = `${ns}\u0000${k}=${v}`;
        let set = this.#byLabel.get(posting);
        if (!set) this.#byLabel.set(posting, (set = new Set()));
        set.add(key);
      }
    }
  }

  /** Ready pods of `namespace` whose labels include every pair of `selector` (an empty selector matches none). */
  count(namespace: string, selector: Record<string, string>): number {
    const pairs = Object.entries(selector);
    if (pairs.length === 0) return 0;
    let smallest: Set<string> | undefined;
    for (const [k, v] of pairs) {
      const set = this.#byLabel.get(`${namespace}\u0000${k}=${v}`);
      if (!set) return 0;
      if (!smallest || set.size < smallest.size) smallest = set;
    }
    let n = 0;
    for (const key of smallest!) {
      const labels = this.#labels.get(key)!;
      if (pairs.every(([k, v]) => labels[k] === v)) n++;
    }
    return n;
  }
}

export function kubernetesServices(services: Iterable<Service>, pods: Iterable<Pod>): DiscoveredService[] {
  const index = new ReadyPodIndex(pods);
  const out: DiscoveredService[] = [];
  for (const s of services) {
    const namespace = s.metadata?.namespace ?? "";
    const ports = [...new Set((s.spec?.ports ?? []).map((p) => p.port))].sort((a, b) => a - b);
    out.push({ name: s.metadata?.name ?? "", namespace, instances: index.count(namespace, s.spec?.selector ?? {}), ports });
  }
  return out.sort(byNamespaceThenName);
}

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
