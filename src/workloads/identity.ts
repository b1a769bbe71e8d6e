/**
 * Who a workload is: the resource attributes of one process image, resolved from what the process declares and
 * what discovery knows. Pure.
 *
 * service.name, first found:
 *   1. OTEL_SERVICE_NAME in the process's own environment;
 *   2. service.name in its OTEL_RESOURCE_ATTRIBUTES;
 *   3. the pod's `app.kubernetes.io/name` label;
 *   4. the owning workload: Deployment, StatefulSet, DaemonSet, CronJob, Job (then a bare ReplicaSet);
 *   5. the container name (Kubernetes container name, else the Docker container name);
 *   6. the executable name.
 * service.namespace: OTEL_RESOURCE_ATTRIBUTES, else the Kubernetes namespace, else the compose project.
 * service.instance.id: OTEL_RESOURCE_ATTRIBUTES, else `<namespace>.<pod>.<container>` in Kubernetes, else
 * `<container id>/<pid>` in a container (the container id for a container's log files), else `<host name>:<pid>`.
 * The other pairs of OTEL_RESOURCE_ATTRIBUTES are kept; observed facts (process.*, container.*, k8s.*) win over them.
 */
import type { Attributes } from "../export/types";
import { APP_NAME_ATTRIBUTE } from "../discovery/kubernetes/pods";
import type { OtelEnvironment } from "./environ";

export { APP_NAME_ATTRIBUTE, APP_NAME_LABEL } from "../discovery/kubernetes/pods";
/** The owner attributes, in the order they name a service. */
export const OWNER_ATTRIBUTES = ["k8s.deployment.name", "k8s.statefulset.name", "k8s.daemonset.name", "k8s.cronjob.name", "k8s.job.name", "k8s.replicaset.name"] as const;
/** service.name of telemetry no workload could be found for (the OpenTelemetry default). */
export const UNKNOWN_SERVICE = "unknown_service";

/** The resource of telemetry about a process nothing is known of (gone before it was seen, or pid 0). */
export const UNKNOWN_WORKLOAD: Attributes = Object.freeze({ "service.name": UNKNOWN_SERVICE }) as Attributes;

/** Where service.name came from (status and tests). */
export type ServiceNameSource = "env:OTEL_SERVICE_NAME" | "env:OTEL_RESOURCE_ATTRIBUTES" | "k8s:label" | "k8s:owner" | "container" | "executable";

export interface IdentityInput {
  /** The pid that exec'd the program (undefined: a container's telemetry not tied to a process, e.g. its log files). */
  pid: number | undefined;
  /** Path of the executable ("" when unknown). */
  executable: string;
  executableName: string;
  /** What the process declares about itself (undefined: its environment could not be read). */
  env: OtelEnvironment | undefined;
  /** Container id from the process's cgroup. */
  containerId: string | undefined;
  /** What discovery knows of that container (container.*, k8s.*), when it does. */
  container: Attributes | undefined;
  hostName: string;
}

const str = (v: unknown) => (typeof v === "string" && v !== "" ? v : undefined);

/** service.name and where it came from. */
export function serviceNameOf(i: IdentityInput): { name: string; source: ServiceNameSource } {
  const env = i.env;
  if (env?.serviceName) return { name: env.serviceName, source: "env:OTEL_SERVICE_NAME" };
  const declared = str(env?.resourceAttributes?.["service.name"]);
  if (declared) return { name: declared, source: "env:OTEL_RESOURCE_ATTRIBUTES" };
  const c = i.container ?? {};
  const label = str(c[APP_NAME_ATTRIBUTE]);
  if (label) return { name: label, source: "k8s:label" };
  for (const key of OWNER_ATTRIBUTES) {
    const owner = str(c[key]);
    if (owner) return { name: owner, source: "k8s:owner" };
  }
  const container = str(c["k8s.container.name"]) ?? str(c["container.name"]);
  if (container) return { name: container, source: "container" };
  return { name: i.executableName || UNKNOWN_SERVICE, source: "executable" };
}

/** The resource attributes of a workload (a new object: callers cache it). */
export function identityAttributes(i: IdentityInput): Attributes {
  const declared = i.env?.resourceAttributes ?? {};
  const c = i.container ?? {};
  const out: Attributes = { ...declared };
  out["service.name"] = serviceNameOf(i).name;
  const namespace = str(declared["service.namespace"]) ?? str(c["k8s.namespace.name"]) ?? str(c["container.label.com.docker.compose.project"]);
  if (namespace) out["service.namespace"] = namespace;
  else delete out["service.namespace"];
  const containerId = str(c["container.id"]) ?? i.containerId;
  const pod = str(c["k8s.pod.name"]);
  out["service.instance.id"] =
    str(declared["service.instance.id"]) ??
    (pod
      ? `${str(c["k8s.namespace.name"]) ?? ""}.${pod}.${str(c["k8s.container.name"]) ?? ""}`
      : containerId
        ? i.pid === undefined
          ? containerId
          : `${containerId}/${i.pid}`
        : i.pid === undefined
          ? i.hostName
          : `${i.hostName}:${i.pid}`);
  if (i.pid !== undefined) out["process.pid"] = i.pid;
  if (i.executableName) out["process.executable.name"] = i.executableName;
  if (i.executable) out["process.executable.path"] = i.executable;
  Object.assign(out, c);
  if (containerId) out["container.id"] = containerId;
  return out;
}

/** The resource of a container's telemetry that no process is known for (its log files): `attributes` are what discovery and the file path say. */
export function containerIdentityAttributes(attributes: Attributes, hostName: string): Attributes {
  const containerId = str(attributes["container.id"]);
  return identityAttributes({ pid: undefined, executable: "", executableName: "", env: undefined, containerId, container: attributes, hostName });
}
