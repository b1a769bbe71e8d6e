/**
 * Kubernetes discovery against our own API server (test/helpers/fakes/k8s-api-server.ts) over TLS with the
 * in-cluster service account layout (token, ca.crt, namespace): node pods and services listed and
 * watched, pod attributes in the workload directory (by container id and by pid through a /proc tree),
 * bookmarks, 410 Gone re-list, token rotation, outage and recovery. The server's fidelity is checked with
 * the real kubectl in the same test (list and watch).
 */
import { afterAll, beforeAll, describe, expect, test, setDefaultTimeout } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { discoveryHarness, kubernetesOnlyYaml, removeTempDirs, serviceAccountDir, tempDir, until, writeToken, type DiscoveryHarness } from "../../helpers/discovery-harness";
import { FakeKubeApiServer } from "../../helpers/fakes/k8s-api-server";
import { makeSelfSignedCert, type SelfSignedCert } from "../../helpers/self-signed-cert";
import { ProcessLabeler } from "../../../src/collectors/network/labels";

/** Generous under CI load; every wait inside is a bounded poll. */
setDefaultTimeout(30_000);

const NODE = "node-a";
const id = (c: string) => c.repeat(64);
const WEB_CID = id("a");
const DB_CID = id("b");
const AGENT_CID = id("c");
const KUBECTL = Bun.which("kubectl");
if (!KUBECTL) console.warn("SKIP kubectl fidelity checks: kubectl is not installed");

/** Runs kubectl without blocking the event loop (the API server answers from this process). */
async function kubectl(argv: string[]): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const p = Bun.spawn(argv, { stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, exitCode] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { exitCode, stdout, stderr };
}

describe("kubernetes discovery against our API server", () => {
  let cert: SelfSignedCert;
  let api: FakeKubeApiServer;
  let h: DiscoveryHarness;
  let saDir: string;
  let procRoot: string;

  /** Rethrows a wait's timeout with the component's state, the loops' counters and the server's last requests. */
  const explain = (e: Error): never => {
    throw new Error(`${e.message}; state ${JSON.stringify(h.status.component("discovery/kubernetes"))}; stats ${JSON.stringify(h.parts.kubernetes.stats())}; server rv ${api.resourceVersion}; last requests ${JSON.stringify(api.requests.slice(-10).map((r) => [r.path, r.query, r.token, r.status]))}`);
  };

  beforeAll(async () => {
    cert = makeSelfSignedCert();
    saDir = serviceAccountDir(cert.cert, "token-1");
    procRoot = tempDir("svc-proc-");
    mkdirSync(join(procRoot, "4242"));
    writeFileSync(join(procRoot, "4242/cgroup"), `0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234.slice/cri-containerd-${WEB_CID}.scope\n`);

    api = new FakeKubeApiServer({ tokens: ["token-1"], tls: cert });
    api.put("pods", FakeKubeApiServer.pod({ name: "web-5d8f7c9b7-x2x9z", node: NODE, labels: { app: "web", "pod-template-hash": "5d8f7c9b7" }, owner: { kind: "ReplicaSet", name: "web-5d8f7c9b7" }, containers: [{ name: "app", id: `containerd://${WEB_CID}`, image: "registry.local:5000/shop/web:1.4.2" }] }));
    api.put("pods", FakeKubeApiServer.pod({ name: "db-0", namespace: "data", node: NODE, labels: { app: "db" }, owner: { kind: "StatefulSet", name: "db" }, containers: [{ name: "postgres", id: `containerd://${DB_CID}` }], ready: false }));
    api.put("pods", FakeKubeApiServer.pod({ name: "svc-agent-7k2lp", namespace: "monitoring", node: NODE, owner: { kind: "DaemonSet", name: "svc-agent" }, containers: [{ name: "agent", id: `containerd://${AGENT_CID}` }] }));
    api.put("pods", FakeKubeApiServer.pod({ name: "web-5d8f7c9b7-other", node: "node-b", labels: { app: "web", "pod-template-hash": "5d8f7c9b7" }, containers: [{ name: "app", id: `containerd://${id("d")}` }] }));
    api.put("services", FakeKubeApiServer.service({ name: "web", selector: { app: "web" }, ports: [443, 80] }));
    api.put("services", FakeKubeApiServer.service({ name: "db", namespace: "data", selector: { app: "db" }, ports: [5432] }));

    h = discoveryHarness(
      kubernetesOnlyYaml(NODE, saDir, "      resync_backoff_max: 200ms\n"),
      { KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: String(api.port) },
      // The written /proc tree's pids are made up: the test's own pid (the agent's, whose telemetry has no workload)
      // may be one of them, so the agent's pid is said to be one none of them is.
      { procRoot, selfPid: 1 },
    );
    await h.start();
  });

  afterAll(async () => {
    await h?.stop();
    api?.stop();
    removeTempDirs(cert.dir);
  });

  test("initial list: this node's pods and the services, connected, ready", async () => {
    await until("connected", () => h.view().kubernetes.connected);
    expect(h.view().kubernetes).toEqual({ enabled: true, connected: true, cluster: "test-cluster", namespace: "monitoring", pods_watched: 3, services_watched: 2 });
    expect(h.status.readiness().checks.discovery).toBe("ok");
    expect(h.view().discovered_services).toEqual([
      { name: "db", namespace: "data", instances: 0, ports: [5432] },
      { name: "web", namespace: "default", instances: 1, ports: [80, 443] },
    ]);
    expect(h.resources.get("discovery/kubernetes")).toEqual({ "k8s.node.name": NODE, "k8s.cluster.name": "test-cluster" });
  });

  test("pod attributes by container id and by pid, with the owning workload", () => {
    const web = h.parts.workloads.forContainer(WEB_CID)!;
    expect(web).toMatchObject({
      "k8s.namespace.name": "default",
      "k8s.pod.name": "web-5d8f7c9b7-x2x9z",
      "k8s.container.name": "app",
      "k8s.node.name": NODE,
      "k8s.cluster.name": "test-cluster",
      "k8s.replicaset.name": "web-5d8f7c9b7",
      "k8s.deployment.name": "web",
      "container.id": WEB_CID,
      "container.image.name": "registry.local:5000/shop/web",
      "container.image.tags": ["1.4.2"],
    });
    expect(web["k8s.pod.uid"]).toMatch(/^[0-9a-f-]{36}$/);
    expect(h.parts.workloads.forContainer(DB_CID)?.["k8s.statefulset.name"]).toBe("db");
    expect(h.parts.workloads.forContainer(AGENT_CID)?.["k8s.daemonset.name"]).toBe("svc-agent");
    expect(h.parts.workloads.forContainer(id("d"))).toBeUndefined();
    expect(h.parts.workloads.forPid(4242)?.["k8s.pod.name"]).toBe("web-5d8f7c9b7-x2x9z");
    // The network collector labels its spans' resource through the same directory.
    const labels = new ProcessLabeler(undefined, h.parts.workloads).describe(4242, "web");
    expect(labels.resource).toMatchObject({ "k8s.pod.name": "web-5d8f7c9b7-x2x9z", "k8s.deployment.name": "web", "k8s.namespace.name": "default" });
  });

  test("the requests: list then watch from the list's resourceVersion with bookmarks, only this node's pods", async () => {
    // "connected" can come before the pods watch request reaches the server: wait for it.
    await until("the pods watch", () => api.requests.some((r) => r.path === "/api/v1/pods" && r.query.watch === "true"));
    const pods = api.requests.filter((r) => r.path === "/api/v1/pods");
    for (const r of pods) expect(r.query.fieldSelector).toBe(`spec.nodeName=${NODE}`);
    const list = pods.find((r) => !r.query.watch)!;
    const watch = pods.find((r) => r.query.watch === "true")!;
    expect(list.query.limit).toBe("500");
    expect(watch.query.allowWatchBookmarks).toBe("true");
    expect(Number(watch.query.resourceVersion)).toBeGreaterThan(0);
    expect(api.requests.every((r) => r.method === "GET" && r.token === "token-1")).toBe(true);
  });

  test("watch follows additions, container restarts, readiness and deletions", async () => {
    const newCid = id("e");
    api.put("pods", FakeKubeApiServer.pod({ name: "web-5d8f7c9b7-new", node: NODE, labels: { app: "web", "pod-template-hash": "5d8f7c9b7" }, owner: { kind: "ReplicaSet", name: "web-5d8f7c9b7" }, containers: [{ name: "app", id: `containerd://${newCid}` }] }));
    await until("new pod", () => h.view().kubernetes.pods_watched === 4);
    expect(h.parts.workloads.forContainer(newCid)?.["k8s.pod.name"]).toBe("web-5d8f7c9b7-new");
    expect(h.view().discovered_services.find((s) => s.name === "web")?.instances).toBe(2);

    const restarted = id("f");
    api.put("pods", FakeKubeApiServer.pod({ name: "web-5d8f7c9b7-new", node: NODE, labels: { app: "web", "pod-template-hash": "5d8f7c9b7" }, owner: { kind: "ReplicaSet", name: "web-5d8f7c9b7" }, containers: [{ name: "app", id: `containerd://${restarted}` }], ready: false }));
    await until("restart followed", () => h.parts.workloads.forContainer(restarted) !== undefined);
    expect(h.parts.workloads.forContainer(newCid)).toBeUndefined();
    expect(h.view().discovered_services.find((s) => s.name === "web")?.instances).toBe(1);

    api.delete("pods", "default", "web-5d8f7c9b7-new");
    await until("deletion followed", () => h.view().kubernetes.pods_watched === 3);
    expect(h.parts.workloads.forContainer(restarted)).toBeUndefined();

    api.put("pods", FakeKubeApiServer.pod({ name: "elsewhere", node: "node-b", containers: [{ name: "x", id: `containerd://${id("9")}` }] }));
    api.put("services", FakeKubeApiServer.service({ name: "cache", ports: [6379] }));
    await until("service added", () => h.view().kubernetes.services_watched === 3);
    expect(h.view().kubernetes.pods_watched).toBe(3);
    api.delete("services", "default", "cache");
    await until("service deleted", () => h.view().kubernetes.services_watched === 2);
  });

  test("bookmarks move the resourceVersion forward without changes", async () => {
    const stats = () => h.parts.kubernetes.stats()["/api/v1/pods"]!;
    const before = stats().bookmarks;
    api.put("services", FakeKubeApiServer.service({ name: "bump", ports: [1] }));
    api.bookmark();
    await until("bookmark", () => stats().bookmarks > before);
    expect(stats().resourceVersion).toBe(String(api.resourceVersion));
    api.delete("services", "default", "bump");
  });

  test("410 Gone after compaction: re-list, and the changes made meanwhile are seen", async () => {
    const stats = () => h.parts.kubernetes.stats()["/api/v1/pods"]!;
    const lists = stats().lists;
    api.failWith = 503;
    api.closeWatches();
    await until("outage seen", () => !h.view().kubernetes.connected);
    expect(h.status.readiness().checks.discovery).toStartWith("failed: kubernetes: /api/v1/");
    api.put("pods", FakeKubeApiServer.pod({ name: "during-outage", node: NODE, containers: [{ name: "c", id: `containerd://${id("1")}` }] }));
    api.delete("pods", "data", "db-0");
    api.compact();
    api.failWith = undefined;
    await until("re-listed", () => stats().lists > lists && h.view().kubernetes.connected);
    expect(stats().gone).toBeGreaterThanOrEqual(1);
    expect(h.parts.workloads.forContainer(id("1"))?.["k8s.pod.name"]).toBe("during-outage");
    expect(h.parts.workloads.forContainer(DB_CID)).toBeUndefined();
    expect(h.status.readiness().checks.discovery).toBe("ok");
  });

  test("410 Gone as an HTTP status is handled the same way", async () => {
    const stats = () => h.parts.kubernetes.stats()["/api/v1/services"]!;
    // The services loop may still be re-listing after the previous test's compaction: a loop with no
    // resourceVersion lists (no 410 to see), so wait until it holds the store's current version.
    await until("services re-listed after the last compaction", () => stats().resourceVersion === String(api.resourceVersion));
    const gone = stats().gone;
    api.goneAsHttpStatus = true;
    api.failWith = 503;
    api.closeWatches();
    await until("outage seen", () => !h.view().kubernetes.connected);
    api.put("services", FakeKubeApiServer.service({ name: "late", ports: [8080] }));
    api.compact();
    api.failWith = undefined;
    await until("re-listed", () => stats().gone > gone && h.view().kubernetes.connected).catch(explain);
    expect(h.view().discovered_services.some((s) => s.name === "late")).toBe(true);
    api.goneAsHttpStatus = false;
  });

  test("token rotation: the new token file is read and used for the next requests", async () => {
    // Both loops watching: no request sent with the old token is still on its way to the server.
    await until("pods and services watched", () => api.openWatches("pods") === 1 && api.openWatches("services") === 1 && h.view().kubernetes.connected).catch(explain);
    const from = api.requests.length;
    writeToken(saDir, "token-2");
    api.rotateToken("token-2");
    await until("rewatched with the new token", () => api.requests.slice(from).filter((r) => r.query.watch === "true" && r.token === "token-2").length >= 2);
    await until("connected", () => h.view().kubernetes.connected).catch(explain);
    expect(api.requests.slice(from).filter((r) => r.token !== "token-2")).toEqual([]);
    api.put("pods", FakeKubeApiServer.pod({ name: "after-rotation", node: NODE, containers: [{ name: "c", id: `containerd://${id("2")}` }] }));
    await until("followed after rotation", () => h.parts.workloads.forContainer(id("2")) !== undefined);
  });

  test("every request is a GET list or watch of pods or services (what the RBAC rules must allow)", () => {
    const verbs = new Set(api.requests.map((r) => `${r.method} ${r.path} ${r.query.watch === "true" ? "watch" : "list"}`));
    expect([...verbs].sort()).toEqual(["GET /api/v1/pods list", "GET /api/v1/pods watch", "GET /api/v1/services list", "GET /api/v1/services watch"]);
    expect(api.rbacRules()).toEqual([
      { apiGroups: [""], resources: ["pods"], verbs: ["list", "watch"] },
      { apiGroups: [""], resources: ["services"], verbs: ["list", "watch"] },
    ]);
  });

  test.skipIf(!KUBECTL)("fidelity: the real kubectl lists and watches our server", async () => {
    const base = [KUBECTL!, "--server", api.url, "--token", "token-2", "--certificate-authority", cert.certPath];
    const list = await kubectl([...base, "get", "pods", "-A", "--field-selector", `spec.nodeName=${NODE}`, "-o", "custom-columns=NS:.metadata.namespace,NAME:.metadata.name,CID:.status.containerStatuses[0].containerID,OWNER:.metadata.ownerReferences[0].kind", "--no-headers"]);
    expect(list.stderr).toBe("");
    expect(list.exitCode).toBe(0);
    const rows = list.stdout.trim().split("\n").map((l) => l.split(/\s+/).join(" ")).sort();
    const ours = [...h.parts.kubernetes.snapshot().pods.values()].map((p) => `${p.metadata?.namespace} ${p.metadata?.name} ${p.status?.containerStatuses?.[0]?.containerID} ${p.metadata?.ownerReferences?.[0]?.kind ?? "<none>"}`).sort();
    expect(rows).toEqual(ours);

    const all = await kubectl([...base, "get", "pods", "-A", "-o", "name"]);
    expect(all.stdout).toContain("pod/elsewhere");

    const watch = Bun.spawn([...base, "get", "pods", "-n", "default", "--watch", "--output-watch-events", "-o", "custom-columns=EVENT:.type,NAME:.object.metadata.name", "--no-headers"], { stdout: "pipe", stderr: "pipe" });
    let out = "";
    const reader = (async () => {
      for await (const chunk of watch.stdout) out += new TextDecoder().decode(chunk);
    })();
    try {
      await until("kubectl's initial list", () => out.includes("after-rotation"), 15_000);
      api.put("pods", FakeKubeApiServer.pod({ name: "seen-by-kubectl", node: NODE, containers: [] }));
      await until("kubectl saw the watch event", () => /ADDED\s+seen-by-kubectl/.test(out), 15_000);
      api.delete("pods", "default", "seen-by-kubectl");
      await until("kubectl saw the deletion", () => /DELETED\s+seen-by-kubectl/.test(out), 15_000);
    } finally {
      watch.kill();
      await watch.exited;
      await reader;
    }
    const kubectlWatch = api.requests.find((r) => r.path === "/api/v1/namespaces/default/pods" && r.query.watch === "true");
    expect(kubectlWatch?.query.resourceVersion).toMatch(/^\d+$/);

    // Plain HTTP without authentication, as `kubectl --server http://127.0.0.1:PORT` (kubectl sends no token over HTTP).
    const plain = new FakeKubeApiServer();
    try {
      plain.put("pods", FakeKubeApiServer.pod({ name: "plain-pod", namespace: "kube-system", node: NODE, containers: [] }));
      const r = await kubectl([KUBECTL!, "--server", plain.url, "get", "pods", "-A", "--no-headers"]);
      expect(r.exitCode).toBe(0);
      expect(r.stdout).toMatch(/^kube-system\s+plain-pod\s+/);
    } finally {
      plain.stop();
    }
  }, 60_000);

  test("shutdown closes the watches; a second shutdown is harmless", async () => {
    await h.stop();
    await until("watches closed", () => api.openWatches() === 0);
    expect(h.view().kubernetes.enabled).toBe(false);
    expect(h.parts.directory.size("kubernetes")).toBe(0);
    await h.parts.kubernetes.shutdown();
  });
});
