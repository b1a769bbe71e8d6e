/**
 * Docker discovery against a REAL dockerd started by this test: the initial list, then start, rename and
 * remove followed through /status/discovery; container and process attributes from the directory
 * (main pid from inspect, an exec'd process through /proc/<pid>/cgroup); dockerd killed -> connected
 * false and /ready not ready; dockerd restarted -> recovered and following again. Then a real container
 * that our Kubernetes API server lists as a pod's container: its processes carry the pod attributes.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { inProcessAgent, type InProcessAgent } from "../../helpers/in-process";
import { spawnAgent, type AgentProcess } from "../../helpers/agent-process";
import { dockerdUnavailable, TestDockerd, TEST_IMAGE } from "../../helpers/dockerd";
import type { DiscoveryView } from "../../../src/discovery/status";
import type { ContainerDirectory } from "../../../src/discovery/directory";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { discoveryHarness, until as poll, type DiscoveryHarness } from "../../helpers/discovery-harness";
import { FakeKubeApiServer } from "../../helpers/fakes/k8s-api-server";
import { quietConfig } from "../../helpers/quiet-config";
import { makeSelfSignedCert } from "../../helpers/self-signed-cert";
import { ProcessLabeler } from "../../../src/collectors/network/labels";

const FOLLOW_TIMEOUT_MS = 10_000;
const TEST_TIMEOUT_MS = 60_000;
const unavailable = dockerdUnavailable();
if (unavailable) console.warn(`SKIP privileged docker discovery: ${unavailable}`);

async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = FOLLOW_TIMEOUT_MS): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}`);
    await Bun.sleep(50);
  }
}

describe.skipIf(unavailable !== undefined)("docker discovery with a real dockerd", () => {
  const dockerd = new TestDockerd();
  let agent: InProcessAgent;
  /** The compiled binary (dist/svc-agent) watching the same dockerd, checked over real HTTP. */
  let binary: AgentProcess;
  let first = "";
  const binaryGet = async (path: string) => {
    const r = await fetch(binary.url + path);
    return { status: r.status, body: (await r.json()) as Record<string, unknown> & { docker?: DiscoveryView["docker"]; checks?: Record<string, string> } };
  };

  const view = async (): Promise<DiscoveryView> => (await (await agent.request("/status/discovery")).json()) as DiscoveryView;
  const ready = async () => {
    const r = await agent.request("/ready");
    return { status: r.status, body: (await r.json()) as { status: string; checks: Record<string, string> } };
  };
  const directory = () => (agent.agent.ctx.workloads as ContainerDirectory);

  beforeAll(async () => {
    try {
      await setUp();
    } catch (e) {
      await binary?.stop();
      await agent?.stop();
      await dockerd.stop();
      throw e;
    }
  }, 60_000);

  async function setUp(): Promise<void> {
    await dockerd.start();
    dockerd.importImage();
    first = dockerd.run("first", { "com.docker.compose.service": "web", "com.docker.compose.project": "shop" });
    const yaml = quietConfig({ docker: `      enabled: true\n      socket: ${dockerd.socket}\n      reconnect_backoff_max: 500ms` });
    agent = await inProcessAgent(yaml);
    binary = await spawnAgent({ config: yaml });
  }

  afterAll(async () => {
    await agent?.stop();
    await binary?.stop();
    await dockerd.stop();
  }, 60_000);

  test("initial list: the container that already ran, its attributes and its service", async () => {
    await until("docker connected", async () => (await view()).docker.connected || undefined);
    const v = await view();
    expect(v.docker).toEqual({ enabled: true, connected: true, containers: 1 });
    expect(v.discovered_services).toEqual([{ name: "web", namespace: "shop", instances: 1, ports: [] }]);
    expect(await ready()).toEqual({ status: 200, body: { status: "ready", checks: { ebpf: "ok", otlp: "ok", discovery: "ok", memory: "ok" } } });
    const attrs = directory().forContainer(first)!;
    expect(attrs["container.id"]).toBe(first);
    expect(attrs["container.name"]).toBe("first");
    expect(attrs["container.image.name"]).toBe("svc-busybox");
    expect(attrs["container.image.tags"]).toEqual(["test"]);
    expect(attrs["container.runtime"]).toBe("docker");
    expect(attrs["container.label.com.docker.compose.service"]).toBe("web");
    const mainPid = Number(dockerd.docker("inspect", "-f", "{{.State.Pid}}", first));
    expect(agent.agent.ctx.workloads.forPid(mainPid)?.["container.name"]).toBe("first");
    await until("the binary connected", async () => (await binaryGet("/status/discovery")).body.docker?.connected || undefined);
    expect((await binaryGet("/status/discovery")).body).toEqual(v as unknown as Record<string, unknown>);
  }, TEST_TIMEOUT_MS);

  test("a process exec'd in the container is found through its cgroup", async () => {
    const mainPid = Number(dockerd.docker("inspect", "-f", "{{.State.Pid}}", first));
    dockerd.docker("exec", "-d", "first", "/bin/sleep", "500");
    const pid = await until("exec'd process", () => {
      const pids = dockerd.docker("top", "first", "-o", "pid").split("\n").slice(1).map(Number);
      return pids.find((p) => p !== mainPid);
    });
    expect(directory().containerIdOf(pid)).toBe(first);
    expect(agent.agent.ctx.workloads.forPid(pid)?.["container.id"]).toBe(first);
    expect(agent.agent.ctx.workloads.forPid(process.pid)).toBeUndefined();
  }, TEST_TIMEOUT_MS);

  test("start, rename and remove are followed within seconds", async () => {
    const second = dockerd.run("second");
    await until("second listed", async () => ((await view()).docker.containers === 2 ? true : undefined));
    expect(directory().forContainer(second)?.["container.name"]).toBe("second");
    expect((await view()).discovered_services.map((s) => `${s.namespace}/${s.name}:${s.instances}`)).toEqual(["docker/svc-busybox:1", "shop/web:1"]);

    dockerd.docker("rename", "second", "renamed");
    await until("rename followed", () => (directory().forContainer(second)?.["container.name"] === "renamed" ? true : undefined));

    dockerd.docker("rm", "-f", "renamed");
    await until("removal followed", async () => ((await view()).docker.containers === 1 ? true : undefined));
    expect(directory().forContainer(second)).toBeUndefined();
  }, TEST_TIMEOUT_MS);

  test("dockerd killed: connected false and not ready; restarted: recovers and follows again", async () => {
    await dockerd.kill();
    await until("disconnected", async () => ((await view()).docker.connected === false ? true : undefined));
    const r = await ready();
    expect(r.status).toBe(503);
    expect(r.body.checks.discovery).toStartWith("failed: docker");
    await until("the binary not ready", async () => ((await binaryGet("/ready")).status === 503 ? true : undefined));
    expect((await binaryGet("/ready")).body.checks?.discovery).toStartWith("failed: docker");
    expect((await binaryGet("/status/discovery")).body.docker?.connected).toBe(false);

    await dockerd.start();
    await until("reconnected", async () => ((await view()).docker.connected ? true : undefined));
    expect((await ready()).body.checks.discovery).toBe("ok");
    await until("the binary reconnected", async () => ((await binaryGet("/ready")).body.checks?.discovery === "ok" ? true : undefined));
    // dockerd stopped its containers on SIGTERM: the re-list after reconnecting must drop them.
    const running = dockerd.docker("ps", "-q").split("\n").filter(Boolean).length;
    await until("re-listed", async () => ((await view()).docker.containers === running ? true : undefined));

    const third = dockerd.run("third");
    await until("third listed", () => (directory().forContainer(third)?.["container.name"] === "third" ? true : undefined));
    expect(dockerd.docker("images", "-q", TEST_IMAGE)).not.toBe("");
  }, TEST_TIMEOUT_MS);
});

describe.skipIf(unavailable !== undefined)("a real container known to the Kubernetes API: its processes carry the pod attributes", () => {
  const dockerd = new TestDockerd();
  let api: FakeKubeApiServer;
  let h: DiscoveryHarness;

  beforeAll(async () => {
    await dockerd.start();
    dockerd.importImage();
  }, 60_000);
  afterAll(async () => {
    await h?.stop();
    api?.stop();
    await dockerd.stop();
  }, 60_000);

  test("docker + kubernetes merged for the container's main and exec'd processes", async () => {
    const id = dockerd.run("k8s_app_web-5d8f7c9b7-x2x9z_default");
    const cert = makeSelfSignedCert();
    api = new FakeKubeApiServer({ tokens: ["t"], tls: cert });
    api.put("pods", FakeKubeApiServer.pod({ name: "web-5d8f7c9b7-x2x9z", node: "node-p", labels: { "pod-template-hash": "5d8f7c9b7" }, owner: { kind: "ReplicaSet", name: "web-5d8f7c9b7" }, containers: [{ name: "app", id: `docker://${id}` }] }));
    const kc = join(cert.dir, "kubeconfig");
    writeFileSync(kc, `apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "${api.url}", certificate-authority: "${cert.certPath}"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n`);
    h = discoveryHarness(`
agent:
  discovery:
    detect_kubernetes: true
    kubernetes:
      kubeconfig: ${kc}
      node_name: node-p
    docker:
      socket: ${dockerd.socket}
    cloud:
      enabled: false
`);
    await h.start();
    await poll("both connected", () => h.view().docker.connected && h.view().kubernetes.connected);
    expect(h.status.readiness().checks.discovery).toBe("ok");
    const mainPid = Number(dockerd.docker("inspect", "-f", "{{.State.Pid}}", id));
    dockerd.docker("exec", "-d", id, "/bin/sleep", "500");
    const child = await poll("exec'd process", () => dockerd.docker("top", id, "-o", "pid").split("\n").slice(1).map(Number).find((p) => p !== mainPid));
    for (const pid of [mainPid, child]) {
      expect(h.parts.workloads.forPid(pid)).toMatchObject({
        "container.id": id,
        "container.runtime": "docker",
        "k8s.pod.name": "web-5d8f7c9b7-x2x9z",
        "k8s.namespace.name": "default",
        "k8s.container.name": "app",
        "k8s.deployment.name": "web",
        "k8s.node.name": "node-p",
        // Its workload identity: named by the owning Deployment (the pod has no app.kubernetes.io/name label).
        "service.name": "web",
        "service.namespace": "default",
        "service.instance.id": "default.web-5d8f7c9b7-x2x9z.app",
        "process.pid": pid,
      });
      // What the network collector puts on a span's resource for this process.
      expect(new ProcessLabeler(undefined, h.parts.workloads).describe(pid, "sleep").resource?.["k8s.pod.name"]).toBe("web-5d8f7c9b7-x2x9z");
    }
    // With Kubernetes on, discovered_services come from the API (no services there), not from containers.
    expect(h.view().discovered_services).toEqual([]);
  }, 60_000);
});
