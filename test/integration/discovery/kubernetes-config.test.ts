/**
 * How Kubernetes discovery is turned on: a kubeconfig (TLS with inline CA, token; re-read when the file
 * changes), NODE_NAME from the environment, disabled without in-cluster environment or kubeconfig,
 * a broken kubeconfig as a permanent error, and a reload that refuses a broken kubeconfig without change.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test, setDefaultTimeout } from "bun:test";
import { renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { discoveryHarness, removeTempDirs, tempDir, until, type DiscoveryHarness } from "../../helpers/discovery-harness";
import { FakeKubeApiServer } from "../../helpers/fakes/k8s-api-server";
import { makeSelfSignedCert, type SelfSignedCert } from "../../helpers/self-signed-cert";

/** Generous under CI load; every wait inside is a bounded poll. */
setDefaultTimeout(30_000);

function kubeconfig(server: string, caPem: string, token: string): string {
  return `apiVersion: v1
kind: Config
clusters:
- name: kc-cluster
  cluster:
    server: ${server}
    certificate-authority-data: ${Buffer.from(caPem).toString("base64")}
users:
- name: agent
  user:
    token: ${token}
contexts:
- name: main
  context:
    cluster: kc-cluster
    user: agent
    namespace: team-a
current-context: main
`;
}

const KUBECTL = Bun.which("kubectl");

const yaml = (kubeconfigPath: string, detect = true) => `
agent:
  discovery:
    detect_kubernetes: ${detect}
    kubernetes:
      kubeconfig: "${kubeconfigPath}"
      resync_backoff_max: 200ms
    docker:
      enabled: false
    cloud:
      enabled: false
`;

describe("kubernetes discovery configuration", () => {
  let cert: SelfSignedCert;
  let api: FakeKubeApiServer;
  let dir: string;
  let h: DiscoveryHarness | undefined;

  beforeAll(() => {
    cert = makeSelfSignedCert();
    api = new FakeKubeApiServer({ tokens: ["kc-token-1"], tls: cert });
    api.put("pods", FakeKubeApiServer.pod({ name: "on-this-node", node: "worker-7", containers: [{ name: "c", id: `containerd://${"7".repeat(64)}` }] }));
    api.put("pods", FakeKubeApiServer.pod({ name: "elsewhere", node: "worker-8", containers: [] }));
    dir = tempDir("svc-kc-");
  });
  afterEach(async () => {
    await h?.stop();
    h = undefined;
  });
  afterAll(() => {
    api.stop();
    removeTempDirs(cert.dir);
  });

  test("kubeconfig: API address, CA and token from it; cluster and namespace from its context; node from NODE_NAME; token change picked up", async () => {
    const path = join(dir, "config");
    writeFileSync(path, kubeconfig(api.url, cert.cert, "kc-token-1"));
    h = discoveryHarness(yaml(path), { NODE_NAME: "worker-7" });
    await h.start();
    await until("connected", () => h!.view().kubernetes.connected);
    expect(h.view().kubernetes).toEqual({ enabled: true, connected: true, cluster: "kc-cluster", namespace: "team-a", pods_watched: 1, services_watched: 0 });
    expect(h.parts.workloads.forContainer("7".repeat(64))?.["k8s.node.name"]).toBe("worker-7");

    const from = api.requests.length;
    writeFileSync(path + ".new", kubeconfig(api.url, cert.cert, "kc-token-2"));
    renameSync(path + ".new", path);
    api.rotateToken("kc-token-2");
    await until("rewatched with the new token", () => api.requests.slice(from).some((r) => r.query.watch === "true" && r.token === "kc-token-2"));
    await until("connected again", () => h!.view().kubernetes.connected);
    expect(api.requests.slice(from).filter((r) => r.status !== 200)).toEqual([]);
  });

  test("more pods than one list page: the list follows `continue` (and kubectl agrees on the total)", async () => {
    const path = join(dir, "config-many");
    writeFileSync(path, kubeconfig(api.url, cert.cert, "kc-token-2"));
    api.rotateToken("kc-token-2");
    for (let i = 0; i < 1_100; i++) api.put("pods", FakeKubeApiServer.pod({ name: `many-${i}`, namespace: "bulk", node: "worker-9", containers: [] }));
    const from = api.requests.length;
    h = discoveryHarness(yaml(path), { NODE_NAME: "worker-9" });
    await h.start();
    await until("connected", () => h!.view().kubernetes.connected);
    expect(h.view().kubernetes.pods_watched).toBe(1_100);
    const pages = api.requests.slice(from).filter((r) => r.path === "/api/v1/pods" && r.query.watch === undefined);
    expect(pages.map((r) => Boolean(r.query.continue))).toEqual([false, true, true]);
    if (KUBECTL) {
      const p = Bun.spawn([KUBECTL, "--server", api.url, "--token", "kc-token-2", "--certificate-authority", cert.certPath, "get", "pods", "-n", "bulk", "--no-headers"], { stdout: "pipe", stderr: "pipe" });
      const [out, code] = await Promise.all([new Response(p.stdout).text(), p.exited]);
      expect(code).toBe(0);
      expect(out.trim().split("\n").length).toBe(1_100);
    }
    for (let i = 0; i < 1_100; i++) api.delete("pods", "bulk", `many-${i}`);
  });

  test("no in-cluster environment and no kubeconfig: disabled (counts as ready), nothing contacted", async () => {
    const before = api.requests.length;
    h = discoveryHarness(yaml(""), { KUBERNETES_SERVICE_HOST: "127.0.0.1" });
    await h.start();
    expect(h.status.component("discovery/kubernetes")?.state).toBe("disabled");
    expect(h.status.readiness().checks.discovery).toBe("ok");
    expect(h.view().kubernetes.enabled).toBe(false);
    expect(api.requests.length).toBe(before);
  });

  test("detect_kubernetes false: disabled even with a kubeconfig", async () => {
    const path = join(dir, "config-off");
    writeFileSync(path, kubeconfig(api.url, cert.cert, "kc-token-2"));
    h = discoveryHarness(yaml(path, false));
    await h.start();
    expect(h.status.component("discovery/kubernetes")?.state).toBe("disabled");
  });

  test("a kubeconfig that cannot be read is a permanent error with the reason", async () => {
    h = discoveryHarness(yaml(join(dir, "missing")));
    await h.start();
    expect(h.status.component("discovery/kubernetes")).toMatchObject({ state: "permanent_error", reason: `kubernetes: cannot read ${join(dir, "missing")}: ENOENT` });
    expect(h.status.readiness().checks.discovery).toStartWith("failed: kubernetes: cannot read");
    expect(h.view().kubernetes).toMatchObject({ enabled: true, connected: false });
  });

  test("reload to a broken kubeconfig is refused and the running watch is kept", async () => {
    const path = join(dir, "config-reload");
    writeFileSync(path, kubeconfig(api.url, cert.cert, "kc-token-2"));
    h = discoveryHarness(yaml(path), { NODE_NAME: "worker-7" });
    await h.start();
    await until("connected", () => h!.view().kubernetes.connected);
    const bad = join(dir, "bad");
    writeFileSync(bad, "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\ncurrent-context: none\n");
    await expect(h.reload(yaml(bad))).rejects.toThrow(/kubernetes: kubeconfig .*: no current cluster/);
    expect(h.view().kubernetes.connected).toBe(true);
    expect(h.view().kubernetes.pods_watched).toBe(1);
  });
});
