/**
 * The ClusterRole grants exactly what Kubernetes discovery uses. The compiled agent runs with the
 * ConfigMap's discovery settings in the in-cluster layout the DaemonSet gives it (service account
 * token and ca.crt, KUBERNETES_SERVICE_HOST/PORT, NODE_NAME) against our Kubernetes API server
 * (test/helpers/fakes/k8s-api-server.ts, TLS), which records every request. After the initial list, a watched
 * change and a server-side end of the watches, the (apiGroup, resource, verb) triples of the recorded
 * requests must equal the triples the ClusterRole grants: nothing used is missing, nothing granted is unused.
 * Discovery documents (/api, /apis, /version...) are non-resource URLs every authenticated client may read
 * (system:discovery) and are left out; any other path the agent requests fails the test.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse as parseYaml, parseAllDocuments } from "yaml";
import { FakeKubeApiServer, type RecordedRequest } from "../helpers/fakes/k8s-api-server";
import { makeSelfSignedCert, type SelfSignedCert } from "../helpers/self-signed-cert";
import { spawnAgent, type AgentProcess } from "../helpers/agent-process";
import { MANIFESTS_PATH } from "../../deploy/kubernetes/generate";
import type { DiscoveryView } from "../../src/discovery/status";

const NODE = "node-1";
const SA_TOKEN = "service-account-token";
const API_TOKEN = "rbac-test-api-token";
const SYNC_TIMEOUT_MS = 20_000;
const POLL_MS = 50;
const NON_RESOURCE_PATHS = new Set(["/api", "/apis", "/version", "/api/v1", "/openapi/v2", "/openapi/v3"]);
const RESOURCE_PATH = /^\/(?:api\/(v1)|apis\/([^/]+)\/([^/]+))\/(?:namespaces\/[^/]+\/)?([a-z]+)(?:\/([^/]+))?$/;

type Obj = Record<string, any>;

/** "group/resource verb" for a recorded request, or undefined for a discovery document. Throws on anything else. */
function permissionOf(r: RecordedRequest): string | undefined {
  if (NON_RESOURCE_PATHS.has(r.path) || /^\/apis\/[^/]+(\/[^/]+)?$/.test(r.path)) return undefined;
  const m = RESOURCE_PATH.exec(r.path);
  if (!m) throw new Error(`the agent requested ${r.method} ${r.path}, which is neither a resource nor a discovery document`);
  const group = m[2] ?? "";
  const methodVerb: Record<string, string> = { POST: "create", PUT: "update", PATCH: "patch", DELETE: "delete" };
  const watch = r.query.watch === "true" || r.query.watch === "1";
  const verb = methodVerb[r.method] ?? (m[5] ? "get" : watch ? "watch" : "list");
  return `${group}/${m[4]} ${verb}`;
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, agent: AgentProcess): Promise<T> {
  const deadline = Date.now() + SYNC_TIMEOUT_MS;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; agent stderr:\n${agent.stderr().slice(-3000)}`);
    await Bun.sleep(POLL_MS);
  }
}

describe("RBAC rules and the API calls of Kubernetes discovery", () => {
  const objs = parseAllDocuments(readFileSync(MANIFESTS_PATH, "utf8")).map((d) => d.toJS() as Obj).filter(Boolean);
  let cert: SelfSignedCert;
  let api: FakeKubeApiServer;
  let agent: AgentProcess;
  let saDir = "";

  beforeAll(async () => {
    cert = makeSelfSignedCert();
    saDir = mkdtempSync(join(tmpdir(), "svc-deploy-sa-"));
    writeFileSync(join(saDir, "token"), SA_TOKEN);
    writeFileSync(join(saDir, "ca.crt"), cert.cert);
    writeFileSync(join(saDir, "namespace"), "svc-agent\n");
    api = new FakeKubeApiServer({ tokens: [SA_TOKEN], tls: cert });
    api.put("pods", FakeKubeApiServer.pod({ name: "web-1", node: NODE, labels: { app: "web" }, containers: [{ name: "app", id: `containerd://${"a".repeat(64)}` }] }));
    api.put("services", FakeKubeApiServer.service({ name: "web", selector: { app: "web" }, ports: [80] }));

    const cm = objs.find((o) => o.kind === "ConfigMap")!;
    const tree = parseYaml(cm.data["config.yaml"]) as Obj;
    // Only what cannot hold in a test changes: loopback port 0, no eBPF or log tailing, no other discovery,
    // and the service account directory (the DaemonSet mounts it at the default path).
    expect(tree.agent.discovery.kubernetes.service_account_dir).toBeUndefined();
    tree.self_telemetry.listen = "127.0.0.1:0";
    tree.otlp.endpoint = "127.0.0.1:9";
    tree.agent.ebpf.enabled = false;
    tree.agent.logs.enabled = false;
    tree.agent.discovery.docker.enabled = false;
    tree.agent.discovery.cloud.enabled = false;
    tree.agent.discovery.kubernetes.service_account_dir = saDir;
    agent = await spawnAgent({
      config: JSON.stringify(tree),
      env: { API_TOKEN, NODE_NAME: NODE, KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: String(api.port) },
    });
  }, SYNC_TIMEOUT_MS + 10_000);

  afterAll(async () => {
    await agent?.stop();
    api?.stop();
    rmSync(saDir, { recursive: true, force: true });
    rmSync(cert.dir, { recursive: true, force: true });
  });

  test(
    "the recorded requests need exactly the permissions the ClusterRole grants",
    async () => {
      const view = async () =>
        (await (await fetch(`${agent.url}/status/discovery`, { headers: { authorization: `Bearer ${API_TOKEN}` } })).json()) as DiscoveryView;
      await until("pods and services listed and watched", async () => {
        const k = (await view()).kubernetes;
        return k.connected && k.pods_watched >= 1 && k.services_watched >= 1 && api.openWatches() >= 2 ? true : undefined;
      }, agent);
      api.put("pods", FakeKubeApiServer.pod({ name: "web-2", node: NODE, labels: { app: "web" }, containers: [{ name: "app", id: `containerd://${"b".repeat(64)}` }] }));
      await until("the new pod seen through the watch", async () => ((await view()).kubernetes.pods_watched >= 2 ? true : undefined), agent);
      const before = api.requests.length;
      api.closeWatches();
      await until("the watches reopened", async () => (api.requests.length > before && api.openWatches() >= 2 ? true : undefined), agent);

      expect(api.requests.every((r) => r.token === SA_TOKEN)).toBe(true);
      const used = new Set(api.requests.map(permissionOf).filter((p): p is string => p !== undefined));
      const role = objs.find((o) => o.kind === "ClusterRole")!;
      const granted = new Set<string>();
      for (const rule of role.rules as Obj[])
        for (const g of rule.apiGroups) for (const r of rule.resources) for (const v of rule.verbs) granted.add(`${g}/${r} ${v}`);
      expect([...used].sort()).toEqual([...granted].sort());
      // Pods are watched across namespaces (fieldSelector spec.nodeName): a ClusterRole bound to the DaemonSet's account.
      const binding = objs.find((o) => o.kind === "ClusterRoleBinding")!;
      const ds = objs.find((o) => o.kind === "DaemonSet")!;
      expect(binding.roleRef).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role.metadata.name });
      expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: ds.spec.template.spec.serviceAccountName, namespace: ds.metadata.namespace }]);
      expect(objs.find((o) => o.kind === "ServiceAccount")!.metadata.name).toBe(ds.spec.template.spec.serviceAccountName);
      console.log(`rbac: discovery used ${[...used].sort().join(", ")} over ${api.requests.length} requests`);
    },
    SYNC_TIMEOUT_MS * 3,
  );
});
