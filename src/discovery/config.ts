/** Schema of `agent.discovery`: Docker, Kubernetes and cloud discovery. Owned by discovery. */
import { Type, type Static } from "@sinclair/typebox";
import { Duration } from "../config/units";

export const DiscoverySchema = Type.Object(
  {
    detect_kubernetes: Type.Boolean({
      default: true,
      description: "Kubernetes discovery; active when the in-cluster environment is present or a kubeconfig is given.",
    }),
    kubernetes: Type.Object(
      {
        kubeconfig: Type.String({ default: "", description: "Path of a kubeconfig file (instead of the in-cluster service account)." }),
        cluster_name: Type.String({ default: "", description: "Cluster name reported in status and attributes." }),
      },
      { additionalProperties: false, default: {} },
    ),
    docker: Type.Object(
      {
        enabled: Type.Boolean({ default: true, description: "Docker Engine discovery." }),
        socket: Type.String({ default: "/var/run/docker.sock", description: "Docker Engine API unix socket." }),
      },
      { additionalProperties: false, default: {} },
    ),
    cloud: Type.Object(
      {
        enabled: Type.Boolean({ default: true, description: "Cloud instance metadata discovery." }),
        provider: Type.Union(
          ["auto", "aws", "gcp", "azure", "none"].map((p) => Type.Literal(p)),
          { default: "auto", description: "auto contacts a provider only when local hints (DMI) say the host runs there." },
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
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false, default: {} },
);
export type DiscoveryConfig = Static<typeof DiscoverySchema>;
