/** The `discovery` status view (GET /status/discovery) and its fields of GET /status. */
import { Type, type Static } from "@sinclair/typebox";
import type { Config } from "../config/schema";
import { Count, type StatusSection } from "../status/model";

export const DiscoveredServiceSchema = Type.Object({
  name: Type.String(),
  namespace: Type.String(),
  instances: Count("Ready instances."),
  ports: Type.Array(Type.Integer()),
});

/** `discovery` view: GET /status/discovery. */
export const DiscoveryViewSchema = Type.Object({
  kubernetes: Type.Object({
    enabled: Type.Boolean(),
    connected: Type.Boolean(),
    cluster: Type.String(),
    namespace: Type.String(),
    pods_watched: Count("Pods watched on this node."),
    services_watched: Count("Services watched."),
  }),
  docker: Type.Object({
    enabled: Type.Boolean(),
    connected: Type.Boolean(),
    containers: Count("Containers known."),
  }),
  cloud: Type.Object({
    provider: Type.String({ description: "aws, gcp, azure or none" }),
    region: Type.String(),
    instance_id: Type.String(),
  }),
  discovered_services: Type.Array(DiscoveredServiceSchema),
});
export type DiscoveryView = Static<typeof DiscoveryViewSchema>;

/** What GET /status shows of the view; discovery publishes it next to the view. */
export const DiscoverySummarySchema = Type.Object({
  // kubernetes.enabled && kubernetes.connected
  kubernetes: Type.Boolean(),
  // docker.enabled && docker.connected
  docker: Type.Boolean(),
  // kubernetes.pods_watched
  pods_discovered: Type.Integer({ minimum: 0 }),
  // docker.containers
  containers_discovered: Type.Integer({ minimum: 0 }),
});
export type DiscoverySummary = Static<typeof DiscoverySummarySchema>;

export const DISCOVERY_STATUS: StatusSection<DiscoveryView, DiscoverySummary, Config> = {
  name: "discovery",
  disabled: (c) => ({
    kubernetes: { enabled: false, connected: false, cluster: c.agent.discovery.kubernetes.cluster_name, namespace: "", pods_watched: 0, services_watched: 0 },
    docker: { enabled: false, connected: false, containers: 0 },
    cloud: { provider: "none", region: "", instance_id: "" },
    discovered_services: [],
  }),
  summary: (v) => ({
    kubernetes: v.kubernetes.enabled && v.kubernetes.connected,
    docker: v.docker.enabled && v.docker.connected,
    pods_discovered: v.kubernetes.pods_watched,
    containers_discovered: v.docker.containers,
  }),
};
