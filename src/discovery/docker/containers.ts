/** Turns Engine API answers into discovery records and telemetry attributes (OpenTelemetry container.* conventions). */
import type { Attributes } from "../../export/types";
import type { EngineContainerInspect, EngineContainerSummary } from "./engine-client";

export const COMPOSE_SERVICE_LABEL = "com.docker.compose.service";
export const COMPOSE_PROJECT_LABEL = "com.docker.compose.project";

/** What discovery keeps of one running container. */
export interface DockerContainer {
  id: string;
  /** Without the leading slash. */
  name: string;
  /** As the container was created from (e.g. `busybox:latest`). */
  image: string;
  labels: Record<string, string>;
  /** Main process in the host pid namespace (0 when unknown). */
  pid: number;
  /** Published (host) ports. */
  publishedPorts: number[];
  /** Addresses on its Docker networks (absent when the engine did not say). */
  addresses?: string[];
}

/** `{ addresses }`: the container's IPv4 and global IPv6 addresses on its networks, when it has any. */
function networkAddresses(networks: Record<string, { IPAddress?: string; GlobalIPv6Address?: string }> | null | undefined): { addresses?: string[] } {
  const out: string[] = [];
  for (const n of Object.values(networks ?? {})) for (const a of [n?.IPAddress, n?.GlobalIPv6Address]) if (a) out.push(a);
  return out.length > 0 ? { addresses: out } : {};
}

/** The service name a container's addresses answer for: its compose service, else its name. */
export const dockerServiceName = (c: DockerContainer) => c.labels[COMPOSE_SERVICE_LABEL] || c.name;

/** Splits `registry:5000/ns/app:1.2@sha256:...` into name and tag. */
export function splitImage(image: string): { name: string; tag: string | undefined } {
  const at = image.indexOf("@");
  const ref = at >= 0 ? image.slice(0, at) : image;
  if (ref.startsWith("sha256:")) return { name: ref, tag: undefined };
  const slash = ref.lastIndexOf("/");
  const colon = ref.lastIndexOf(":");
  if (colon > slash) return { name: ref.slice(0, colon), tag: ref.slice(colon + 1) };
  return { name: ref, tag: undefined };
}

export function fromSummary(s: EngineContainerSummary, pid: number): DockerContainer {
  const ports = new Set<number>();
  for (const p of s.Ports ?? []) if (p.PublicPort) ports.add(p.PublicPort);
  return {
    id: s.Id,
    name: (s.Names[0] ?? s.Id.slice(0, 12)).replace(/^\//, ""),
    image: s.Image,
    labels: s.Labels ?? {},
    pid,
    publishedPorts: [...ports].sort((a, b) => a - b),
    ...networkAddresses(s.NetworkSettings?.Networks),
  };
}

export function fromInspect(i: EngineContainerInspect): DockerContainer {
  const ports = new Set<number>();
  for (const bindings of Object.values(i.NetworkSettings?.Ports ?? {})) {
    for (const b of bindings ?? []) {
      const n = Number(b.HostPort);
      if (Number.isInteger(n) && n > 0) ports.add(n);
    }
  }
  return {
    id: i.Id,
    name: i.Name.replace(/^\//, ""),
    image: i.Config.Image,
    labels: i.Config.Labels ?? {},
    pid: i.State.Running ? i.State.Pid : 0,
    publishedPorts: [...ports].sort((a, b) => a - b),
    ...networkAddresses(i.NetworkSettings?.Networks),
  };
}

/** container.id, container.name, container.image.name/tags, container.runtime, container.label.<key>. */
export function dockerAttributes(c: DockerContainer): Attributes {
  const { name, tag } = splitImage(c.image);
  const attrs: Attributes = {
    "container.id": c.id,
    "container.name": c.name,
    "container.image.name": name,
    "container.runtime": "docker",
  };
  if (tag) attrs["container.image.tags"] = [tag];
  for (const [k, v] of Object.entries(c.labels)) attrs[`container.label.${k}`] = v;
  return attrs;
}
