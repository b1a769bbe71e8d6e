/**
 * Pods and services as discovery keeps them, and the k8s.* attributes of a pod's containers
 * (OpenTelemetry semantic conventions), including the owning workload from owner references:
 * ReplicaSet -> Deployment (the ReplicaSet name less its pod-template-hash suffix), Job -> CronJob
 * (the Job name less its scheduled-time suffix), DaemonSet, StatefulSet.
 */
import type { Attributes } from "../../export/types";
import { normalizeContainerId, type ContainerEntry } from "../directory";
import { splitImage } from "../docker/containers";
import type { KubeObjectMeta } from "./api-client";

/** The pod label naming the application (Kubernetes recommended labels). */
export const APP_NAME_LABEL = "app.kubernetes.io/name";
/** The resource attribute discovery stores that label under (semantic conventions: k8s.pod.label.<key>). */
export const APP_NAME_ATTRIBUTE = `k8s.pod.label.${APP_NAME_LABEL}`;

export interface PodContainerStatus {
  name: string;
  containerID?: string;
  image?: string;
  ready?: boolean;
}

export interface Pod {
  metadata?: KubeObjectMeta;
  spec?: { nodeName?: string; containers?: Array<{ name: string; image?: string }> };
  status?: {
    phase?: string;
    conditions?: Array<{ type: string; status: string }>;
    containerStatuses?: PodContainerStatus[];
    initContainerStatuses?: PodContainerStatus[];
    ephemeralContainerStatuses?: PodContainerStatus[];
    podIP?: string;
    podIPs?: Array<{ ip: string }>;
  };
}

export interface ServicePort {
  port: number;
  name?: string;
  protocol?: string;
}

export interface Service {
  metadata?: KubeObjectMeta;
  spec?: { selector?: Record<string, string>; ports?: ServicePort[] };
}

/** `namespace/name`. */
export function objectKey(o: { metadata?: KubeObjectMeta }): string {
  return `${o.metadata?.namespace ?? ""}/${o.metadata?.name ?? ""}`;
}

/** A running pod whose Ready condition is True. */
export function podReady(p: Pod): boolean {
  return p.status?.phase === "Running" && (p.status.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True");
}

/** k8s.<workload>.name attributes of a pod from its controller owner reference. */
export function workloadAttributes(p: Pod): Attributes {
  const owners = p.metadata?.ownerReferences ?? [];
  const owner = owners.find((o) => o.controller) ?? owners[0];
  if (!owner) return {};
  const attrs: Attributes = {};
  switch (owner.kind) {
    case "ReplicaSet": {
      attrs["k8s.replicaset.name"] = owner.name;
      const hash = p.metadata?.labels?.["pod-template-hash"];
      if (hash && owner.name.endsWith(`-${hash}`)) attrs["k8s.deployment.name"] = owner.name.slice(0, -hash.length - 1);
      break;
    }
    case "DaemonSet":
      attrs["k8s.daemonset.name"] = owner.name;
      break;
    case "StatefulSet":
      attrs["k8s.statefulset.name"] = owner.name;
      break;
    case "Job": {
      attrs["k8s.job.name"] = owner.name;
      const m = /^(.+)-\d{8,}$/.exec(owner.name);
      if (m) attrs["k8s.cronjob.name"] = m[1]!;
      break;
    }
    case "ReplicationController":
      attrs["k8s.replicationcontroller.name"] = owner.name;
      break;
  }
  return attrs;
}

/** The directory entries of a pod's containers that have a container id (started at least once). */
export function podContainerEntries(p: Pod, clusterName: string): ContainerEntry[] {
  const podAttrs: Attributes = {
    "k8s.namespace.name": p.metadata?.namespace ?? "",
    "k8s.pod.name": p.metadata?.name ?? "",
    "k8s.pod.uid": p.metadata?.uid ?? "",
    ...workloadAttributes(p),
  };
  if (p.spec?.nodeName) podAttrs["k8s.node.name"] = p.spec.nodeName;
  // The label that names the application comes first in the workload's service.name (src/workloads/identity.ts).
  const appName = p.metadata?.labels?.[APP_NAME_LABEL];
  if (appName) podAttrs[APP_NAME_ATTRIBUTE] = appName;
  if (clusterName) podAttrs["k8s.cluster.name"] = clusterName;
  const workload = podAttrs["k8s.deployment.name"] ?? podAttrs["k8s.statefulset.name"] ?? podAttrs["k8s.daemonset.name"] ?? podAttrs["k8s.cronjob.name"] ?? podAttrs["k8s.job.name"];
  const service = typeof workload === "string" && workload ? workload : (p.metadata?.name ?? "");
  const addresses = [...new Set([...(p.status?.podIP ? [p.status.podIP] : []), ...(p.status?.podIPs ?? []).map((x) => x.ip)])];
  const entries: ContainerEntry[] = [];
  const statuses = [...(p.status?.initContainerStatuses ?? []), ...(p.status?.containerStatuses ?? []), ...(p.status?.ephemeralContainerStatuses ?? [])];
  for (const s of statuses) {
    if (!s.containerID) continue;
    const id = normalizeContainerId(s.containerID);
    const attributes: Attributes = { ...podAttrs, "k8s.container.name": s.name, "container.id": id };
    const image = s.image ?? p.spec?.containers?.find((c) => c.name === s.name)?.image;
    if (image) {
      const { name, tag } = splitImage(image);
      attributes["container.image.name"] = name;
      if (tag) attributes["container.image.tags"] = [tag];
    }
    entries.push(addresses.length > 0 && service ? { id, attributes, addresses, service } : { id, attributes });
  }
  return entries;
}

const trimStatuses = (s: PodContainerStatus[] | undefined) => s?.map((c) => ({ name: c.name, containerID: c.containerID, image: c.image, ready: c.ready }));

/** The fields of a pod that discovery uses (a full pod object is several KB; a node can hold hundreds). */
export function trimPod(p: Pod): Pod {
  const m = p.metadata ?? {};
  return {
    metadata: {
      name: m.name,
      namespace: m.namespace,
      uid: m.uid,
      resourceVersion: m.resourceVersion,
      labels: m.labels,
      ownerReferences: m.ownerReferences?.map((o) => ({ kind: o.kind, name: o.name, controller: o.controller })),
    },
    spec: { nodeName: p.spec?.nodeName, containers: p.spec?.containers?.map((c) => ({ name: c.name, image: c.image })) },
    status: {
      phase: p.status?.phase,
      conditions: p.status?.conditions?.filter((c) => c.type === "Ready").map((c) => ({ type: c.type, status: c.status })),
      containerStatuses: trimStatuses(p.status?.containerStatuses),
      initContainerStatuses: trimStatuses(p.status?.initContainerStatuses),
      ephemeralContainerStatuses: trimStatuses(p.status?.ephemeralContainerStatuses),
      podIP: p.status?.podIP,
      podIPs: p.status?.podIPs?.map((x) => ({ ip: x.ip })),
    },
  };
}

/** The fields of a service that discovery uses. */
export function trimService(s: Service): Service {
  const m = s.metadata ?? {};
  return {
    metadata: { name: m.name, namespace: m.namespace, uid: m.uid, resourceVersion: m.resourceVersion },
    spec: { selector: s.spec?.selector, ports: s.spec?.ports?.map((p) => ({ port: p.port, name: p.name, protocol: p.protocol })) },
  };
}
