/** Keys of `agent.discovery` owned by Kubernetes discovery: `detect_kubernetes` and `kubernetes`. */
import { Type, type Static, type TObject } from "@sinclair/typebox";
import type { ConfigProblem } from "../../config/problems";
import { Duration, msOf } from "../../config/units";

export const KubernetesConfigKeys = {
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
};
export type KubernetesConfig = Static<TObject<typeof KubernetesConfigKeys>>;

export function validateKubernetes(d: KubernetesConfig): ConfigProblem[] {
  return msOf(d.kubernetes, "resync_backoff_max") <= 0 ? [{ path: "agent.discovery.kubernetes.resync_backoff_max", message: "must be greater than 0" }] : [];
}
