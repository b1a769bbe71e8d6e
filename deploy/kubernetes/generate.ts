/**
 * Writes deploy/kubernetes/svc-agent.yaml: the Helm chart rendered with its default values (and the token
 * Secret referenced by name), so the plain manifests and the chart cannot drift (test/deploy checks it).
 *
 *   bun deploy/kubernetes/generate.ts
 */
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { renderChartText, type RenderOptions } from "../helm/render";

const ROOT = resolve(import.meta.dir, "../..");
export const MANIFESTS_PATH = join(ROOT, "deploy/kubernetes/svc-agent.yaml");
export const CHART_DIR = join(ROOT, "deploy/helm/svc-agent");
/** The release the plain manifests stand for. */
export const MANIFEST_RENDER: RenderOptions = {
  name: "svc-agent",
  namespace: "svc-agent",
  values: { apiToken: { existingSecret: "svc-agent-api-token" } },
};

const HEADER = `# svc-agent on Kubernetes: ServiceAccount, ClusterRole(+Binding), ConfigMap, DaemonSet, headless Service.
# Generated from the Helm chart (deploy/helm/svc-agent) with its default values by
# \`bun deploy/kubernetes/generate.ts\`; do not edit by hand (test/deploy checks that they agree).
# Before applying, create the namespace and the Secret holding the HTTP interface's bearer token:
#   kubectl create namespace svc-agent
#   kubectl -n svc-agent create secret generic svc-agent-api-token --from-literal=api-token="$(head -c 32 /dev/urandom | base64)"
#   kubectl apply -f deploy/kubernetes/svc-agent.yaml
`;

export function manifestsText(): string {
  return HEADER + renderChartText(CHART_DIR, MANIFEST_RENDER);
}

if (import.meta.main) {
  writeFileSync(MANIFESTS_PATH, manifestsText());
  console.log(`wrote ${MANIFESTS_PATH}`);
}
