/**
 * discovered_services from Kubernetes: the services, each with the ready pods of this node that match its
 * selector as instances and its service ports.
 */
import { byNamespaceThenName, type DiscoveredService } from "../plugin";
import { objectKey, podReady, type Pod, type Service } from "./pods";

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

