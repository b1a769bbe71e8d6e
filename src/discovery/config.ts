/** Schema of `agent.discovery`: Docker, Kubernetes and cloud discovery. Owned by discovery. */
import { Type, type Static } from "@sinclair/typebox";
import type { ConfigProblem } from "../config/problems";
import { Duration, msOf } from "../config/units";

export const DiscoverySchema = Type.Object(
  {
    detect_kubernetes: Type.Boolean({
      default: true,
      description: "Kubernetes discovery; active when the in-cluster environment is present or a kubeconfig is given.",
    }),
    kubernetes: Type.Object(
      {
        kubeconfig: Type.String({ default: "", description: "Path of a kubeconfig file (instead of the in-cluster service account); its current context gives the API address and credentials." }),
        cluster_name: Type.String({ default: "", description: "Cluster name reported in status and as k8s.cluster.name; empty: the kubeconfig's current cluster name, or none in-cluster." }),
        node_name: Type.String({
          default: "",
          description: "This node's name (pods are watched with fieldSelector spec.nodeName=<it>); empty: the NODE_NAME environment variable, else the host name.",
        }),
        service_account_dir: Type.String({
          default: "/var/run/secrets/kubernetes.io/serviceaccount",
          description: "Directory of the in-cluster service account (token, ca.crt, namespace); the token is re-read when the file changes.",
        }),
        resync_backoff_max: Duration("30s", "Longest wait between attempts after API errors (exponential backoff from 500ms)."),
      },
      { additionalProperties: false, default: {} },
    ),
    docker: Type.Object(
      {
        enabled: Type.Union([Type.Boolean(), Type.Literal("auto")], {
          default: "auto",
          description:
            "Docker Engine discovery: true requires the Engine (readiness fails while its socket cannot be reached); auto follows it when the socket exists and waits for it otherwise, readiness unaffected; false turns it off.",
        }),
        socket: Type.String({ default: "/var/run/docker.sock", description: "Docker Engine API unix socket." }),
        reconnect_backoff_max: Duration("10s", "Longest wait between reconnection attempts to the Engine API (exponential backoff from 250ms)."),
      },
      { additionalProperties: false, default: {} },
    ),
    cloud: Type.Object(
      {
        enabled: Type.Boolean({ default: true, description: "Cloud instance metadata discovery." }),
        provider: Type.Union(
          [Type.Literal("auto"), Type.Literal("aws"), Type.Literal("gcp"), Type.Literal("azure"), Type.Literal("none")],
          { default: "auto", description: "auto contacts a provider only when local hints (DMI, /sys/hypervisor/uuid) say the host runs there." },
        ),
        endpoints: Type.Object(
          {
            aws: Type.String({ default: "http://169.254.169.254", description: "AWS metadata base address." }),
            gcp: Type.String({ default: "http://metadata.google.internal", description: "GCP metadata base address." }),
            azure: Type.String({ default: "http://169.254.169.254", description: "Azure metadata base address." }),
          },
          { additionalProperties: false, default: {} },
        ),
        timeout: Duration("2s", "Timeout of each metadata request."),
        hints_root: Type.String({
          default: "/",
          description: "Root under which the local hints are read (sys/class/dmi/id/*, sys/hypervisor/uuid); e.g. /host when the host's /sys is mounted at /host/sys.",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false, default: {} },
);
export type DiscoveryConfig = Static<typeof DiscoverySchema>;
export type CloudProviderSetting = DiscoveryConfig["cloud"]["provider"];

/** Cross-field rules of `agent.discovery`: metadata addresses are http(s) URLs, timeouts and backoffs positive. */
export function validateDiscovery(d: DiscoveryConfig): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  for (const [name, url] of Object.entries(d.cloud.endpoints)) {
    let ok = false;
    try {
      const u = new URL(url);
      ok = (u.protocol === "http:" || u.protocol === "https:") && u.search === "" && u.hash === "";
    } catch {
      ok = false;
    }
    if (!ok) problems.push({ path: `agent.discovery.cloud.endpoints.${name}`, message: `must be an http:// or https:// base address without query, got ${JSON.stringify(url)}` });
  }
  const positive: Array<[string, number]> = [
    ["agent.discovery.cloud.timeout", msOf(d.cloud, "timeout")],
    ["agent.discovery.docker.reconnect_backoff_max", msOf(d.docker, "reconnect_backoff_max")],
    ["agent.discovery.kubernetes.resync_backoff_max", msOf(d.kubernetes, "resync_backoff_max")],
  ];
  for (const [path, ms] of positive) if (ms <= 0) problems.push({ path, message: "must be greater than 0" });
  if (d.docker.enabled !== false && d.docker.socket.trim() === "") problems.push({ path: "agent.discovery.docker.socket", message: "must not be empty unless docker.enabled is false" });
  return problems;
}
