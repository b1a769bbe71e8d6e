/**
 * Workload identity on the Kubernetes path, against the project's API server (test/helpers/fakes/k8s-api-server.ts,
 * real list/watch over TLS with an in-cluster service account) and a /proc tree written by the test (a pod's
 * processes: stat, exe, cgroup, environ). Kubernetes itself cannot run here: pods are objects the test server
 * serves, processes are files. service.name follows the documented order: OTEL_SERVICE_NAME in the process's
 * environment, the app.kubernetes.io/name label, the owning workload, the container name.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { discoveryHarness, kubernetesOnlyYaml, removeTempDirs, serviceAccountDir, tempDir, until, type DiscoveryHarness } from "../../helpers/discovery-harness";
import { FakeKubeApiServer } from "../../helpers/fakes/k8s-api-server";
import { makeSelfSignedCert, type SelfSignedCert } from "../../helpers/self-signed-cert";
import type { WorkloadRegistry } from "../../../src/workloads/registry";

setDefaultTimeout(30_000);

const NODE = "node-a";
const cid = (c: string) => c.repeat(64);

/** Pods on this node: one container each, one process each (pid), plus a forked child of the web server. */
const PODS = [
  { pid: 5001, cid: cid("1"), exe: "/usr/sbin/nginx", pod: { name: "front-7c9d5b-abcde", labels: { "app.kubernetes.io/name": "storefront", "pod-template-hash": "7c9d5b" }, owner: { kind: "ReplicaSet", name: "front-7c9d5b" }, container: "nginx" }, expect: "storefront" },
  { pid: 5002, cid: cid("2"), exe: "/usr/local/bin/web", pod: { name: "web-5d8f7c9b7-x2x9z", labels: { "pod-template-hash": "5d8f7c9b7" }, owner: { kind: "ReplicaSet", name: "web-5d8f7c9b7" }, container: "app" }, expect: "web" },
  { pid: 5003, cid: cid("3"), exe: "/usr/bin/postgres", env: ["OTEL_SERVICE_NAME=orders-db", "PGPASSWORD=hunter2"], pod: { name: "db-0", namespace: "data", owner: { kind: "StatefulSet", name: "db" }, container: "postgres" }, expect: "orders-db" },
  { pid: 5005, cid: cid("5"), exe: "/bin/agent", pod: { name: "logs-q8x2v", namespace: "kube-system", owner: { kind: "DaemonSet", name: "logs" }, container: "fluent" }, expect: "logs" },
  { pid: 5006, cid: cid("6"), exe: "/bin/migrate", pod: { name: "migrate-28391400-zq7lx", owner: { kind: "Job", name: "migrate-28391400" }, container: "job" }, expect: "migrate" },
  { pid: 5007, cid: cid("7"), exe: "/bin/sh", pod: { name: "debug", container: "shell" }, expect: "shell" },
] as const;
const CHILD_PID = 5004;

function writeProcess(procRoot: string, pid: number, p: { ppid?: number; comm: string; exe: string; cgroup: string; env?: readonly string[] }): void {
  const d = join(procRoot, String(pid));
  mkdirSync(d);
  writeFileSync(join(d, "stat"), `${pid} (${p.comm}) S ${p.ppid ?? 1} 0 0`);
  writeFileSync(join(d, "status"), "Uid:\t0\t0\t0\t0\n");
  symlinkSync(p.exe, join(d, "exe"));
  writeFileSync(join(d, "cgroup"), p.cgroup);
  writeFileSync(join(d, "environ"), [...(p.env ?? ["PATH=/bin"])].join("\0") + "\0");
}

describe("workload identity from Kubernetes (our API server, a written /proc tree)", () => {
  let cert: SelfSignedCert;
  let api: FakeKubeApiServer;
  let h: DiscoveryHarness;
  let saDir: string;
  let procRoot: string;
  const registry = () => h.parts.workloads as WorkloadRegistry;

  beforeAll(async () => {
    cert = makeSelfSignedCert();
    saDir = serviceAccountDir(cert.cert, "token-1");
    procRoot = tempDir("svc-proc-");
    api = new FakeKubeApiServer({ tokens: ["token-1"], tls: cert });
    for (const p of PODS) {
      const cgroup = `0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${p.pid}.slice/cri-containerd-${p.cid}.scope\n`;
      writeProcess(procRoot, p.pid, { comm: p.exe.split("/").pop()!, exe: p.exe, cgroup, env: "env" in p ? p.env : undefined });
      const pod = p.pod as { name: string; namespace?: string; labels?: Record<string, string>; owner?: { kind: string; name: string }; container: string };
      api.put("pods", FakeKubeApiServer.pod({ name: pod.name, namespace: pod.namespace, node: NODE, labels: pod.labels, owner: pod.owner, containers: [{ name: pod.container, id: `containerd://${p.cid}`, image: `registry.local/${pod.container}:1.0` }] }));
    }
    // A worker the web server forked (same program, same container).
    writeProcess(procRoot, CHILD_PID, { ppid: 5002, comm: "web", exe: "/usr/local/bin/web", cgroup: `0::/kubepods.slice/cri-containerd-${cid("2")}.scope\n` });
    h = discoveryHarness(
      kubernetesOnlyYaml(NODE, saDir),
      { KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: String(api.port) },
      // The written /proc tree's pids are made up: the test's own pid (the agent's, whose telemetry has no workload)
      // may be one of them, so the agent's pid is said to be one none of them is.
      { procRoot, selfPid: 1 },
    );
    await h.start();
    await until("connected", () => h.view().kubernetes.connected);
  });

  afterAll(async () => {
    await h?.stop();
    api?.stop();
    removeTempDirs(cert.dir);
  });

  test("service.name in the documented order: environment, app.kubernetes.io/name, owning workload, container name", () => {
    for (const p of PODS) expect([p.pid, registry().forPid(p.pid)?.["service.name"]]).toEqual([p.pid, p.expect]);
  });

  test("namespace, instance id, process, container and k8s attributes; the environment's other values never appear", () => {
    expect(registry().forPid(5002)).toMatchObject({
      "service.name": "web",
      "service.namespace": "default",
      "service.instance.id": "default.web-5d8f7c9b7-x2x9z.app",
      "process.pid": 5002,
      "process.executable.name": "web",
      "process.executable.path": "/usr/local/bin/web",
      "container.id": cid("2"),
      "container.image.name": "registry.local/app",
      "k8s.pod.name": "web-5d8f7c9b7-x2x9z",
      "k8s.namespace.name": "default",
      "k8s.container.name": "app",
      "k8s.node.name": NODE,
      "k8s.cluster.name": "test-cluster",
      "k8s.replicaset.name": "web-5d8f7c9b7",
      "k8s.deployment.name": "web",
    });
    expect(registry().forPid(5003)).toMatchObject({ "service.namespace": "data", "k8s.statefulset.name": "db" });
    expect(JSON.stringify(registry().forPid(5003))).not.toContain("hunter2");
    expect(registry().forPid(5006)).toMatchObject({ "k8s.job.name": "migrate-28391400", "k8s.cronjob.name": "migrate" });
  });

  test("one resource object per workload; a forked child shares its parent's; a label added by a watch event renames it", async () => {
    const web = registry().forPid(5002)!;
    expect(registry().forPid(5002)).toBe(web);
    expect(registry().forPid(CHILD_PID)).toBe(web);
    api.put("pods", FakeKubeApiServer.pod({ name: "web-5d8f7c9b7-x2x9z", node: NODE, labels: { "pod-template-hash": "5d8f7c9b7", "app.kubernetes.io/name": "web-shop" }, owner: { kind: "ReplicaSet", name: "web-5d8f7c9b7" }, containers: [{ name: "app", id: `containerd://${cid("2")}`, image: "registry.local/app:1.0" }] }));
    const renamed = await until("the label to be seen", () => (registry().forPid(5002)?.["service.name"] === "web-shop" ? registry().forPid(5002) : undefined));
    expect(renamed).not.toBe(web);
    expect(registry().forPid(CHILD_PID)).toBe(renamed);
  });
});
