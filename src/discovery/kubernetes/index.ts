/** Kubernetes discovery as a source of the registry (sources.ts): configuration, view part, /status fields, services. */
import { Type } from "@sinclair/typebox";
import { Count } from "../../status/model";
import { defineSource } from "../plugin";
import { kubernetesServices } from "./services";
import { KubernetesConfigKeys, validateKubernetes } from "./config";
import { KubernetesSource } from "./source";

export const kubernetes = defineSource({
  key: "kubernetes",
  config: KubernetesConfigKeys,
  validate: validateKubernetes,
  view: Type.Object({
    enabled: Type.Boolean(),
    connected: Type.Boolean(),
    cluster: Type.String(),
    namespace: Type.String(),
    pods_watched: Count("Pods watched on this node."),
    services_watched: Count("Services watched."),
  }),
  disabled: (d) => ({ enabled: false, connected: false, cluster: d.kubernetes.cluster_name, namespace: "", pods_watched: 0, services_watched: 0 }),
  create: (d, deps) => new KubernetesSource(d, deps.env, deps.directory, deps.pipeline, deps.tasks),
  viewOf: (k) => {
    const s = k.snapshot();
    return { enabled: s.enabled, connected: s.connected, cluster: s.cluster, namespace: s.namespace, pods_watched: s.pods.size, services_watched: s.services.size };
  },
  summary: {
    active: { ofView: (v) => v.enabled && v.connected, ofSource: (k) => k.enabled && k.connected },
    counts: { pods_discovered: { ofView: (v) => v.pods_watched, ofSource: (k) => k.podCount } },
  },
  // Services and their ready pods, whenever Kubernetes discovery is active.
  services: (k) => {
    const s = k.snapshot();
    return s.enabled ? { stamp: String(k.generation), list: () => kubernetesServices(s.services.values(), s.pods.values()) } : undefined;
  },
});
