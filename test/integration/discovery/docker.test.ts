/**
 * Docker discovery against a fake Engine API on a unix socket: events that arrive while the list is in
 * flight, published ports in discovered_services, a socket that appears late, a stream the engine closes
 * (reconnect and re-list), reload to another socket, shutdown twice and without start.
 * The real dockerd is exercised in test/privileged/discovery.
 */
import { afterAll, afterEach, describe, expect, test, setDefaultTimeout } from "bun:test";

import { join } from "node:path";
import { discoveryHarness, removeTempDirs, tempDir, until, type DiscoveryHarness } from "../../helpers/discovery-harness";
import { FakeDockerEngine, type FakeContainer } from "../../helpers/fakes/docker-engine";

/** Generous under CI load; every wait inside is a bounded poll. */
setDefaultTimeout(30_000);

const cid = (c: string) => c.repeat(64);
const yaml = (socket: string) => `
agent:
  discovery:
    detect_kubernetes: false
    docker:
      enabled: true
      socket: ${socket}
      reconnect_backoff_max: 200ms
    cloud:
      enabled: false
`;

describe("docker discovery against a fake engine", () => {
  const engines: FakeDockerEngine[] = [];
  let h: DiscoveryHarness | undefined;
  const engine = (socket = join(tempDir("svc-fde-"), "docker.sock")) => {
    const e = new FakeDockerEngine(socket);
    engines.push(e);
    return e;
  };
  afterEach(async () => {
    await h?.stop();
    h = undefined;
    for (const e of engines.splice(0)) e.stop();
  });
  afterAll(() => removeTempDirs());

  test("events that arrive while the list is in flight are applied after it", async () => {
    const e = engine();
    const gone: FakeContainer = { id: cid("1"), name: "gone", image: "a:1" };
    const stays: FakeContainer = { id: cid("2"), name: "stays", image: "a:1" };
    e.containers.set(gone.id, gone);
    e.containers.set(stays.id, stays);
    let release!: () => void;
    e.holdList = new Promise((r) => (release = r));
    h = discoveryHarness(yaml(e.socket));
    await h.start();
    await until("list requested", () => (e.requests.get("/containers/json") ?? 0) > 0 && e.openStreams === 1);
    e.emit("destroy", gone);
    e.start({ id: cid("3"), name: "late", image: "b:2", pid: 777 });
    e.emit("rename", stays, { name: "renamed", oldName: "/stays" });
    release();
    await until("connected", () => h!.view().docker.connected);
    await until("events applied", () => h!.view().docker.containers === 2 && h!.parts.workloads.forContainer(cid("2"))?.["container.name"] === "renamed");
    expect(h.parts.workloads.forContainer(cid("1"))).toBeUndefined();
    expect(h.parts.workloads.forPid(777)?.["container.name"]).toBe("late");
  });

  test("discovered_services groups by compose service with published ports", async () => {
    const e = engine();
    const labels = { "com.docker.compose.service": "api", "com.docker.compose.project": "shop" };
    e.containers.set(cid("4"), { id: cid("4"), name: "shop-api-1", image: "shop/api:1", labels, published: { 8080: 80 } });
    e.containers.set(cid("5"), { id: cid("5"), name: "shop-api-2", image: "shop/api:1", labels, published: { 8081: 80 } });
    e.containers.set(cid("6"), { id: cid("6"), name: "cache", image: "redis:7" });
    h = discoveryHarness(yaml(e.socket));
    await h.start();
    await until("connected", () => h!.view().docker.connected);
    expect(h.view().discovered_services).toEqual([
      { name: "redis", namespace: "docker", instances: 1, ports: [] },
      { name: "api", namespace: "shop", instances: 2, ports: [8080, 8081] },
    ].sort((a, b) => a.namespace.localeCompare(b.namespace)));
    e.start({ id: cid("7"), name: "shop-api-3", image: "shop/api:1", labels, published: { 8082: 80 } });
    await until("third instance", () => h!.view().discovered_services.find((s) => s.name === "api")?.instances === 3);
    expect(h.view().discovered_services.find((s) => s.name === "api")?.ports).toEqual([8080, 8081, 8082]);
    e.emit("die", { id: cid("6"), name: "cache", image: "redis:7" });
    await until("died", () => !h!.view().discovered_services.some((s) => s.name === "redis"));
  });

  test("missing socket: enabled, not connected, clear reason; connects when the engine appears", async () => {
    const socket = join(tempDir("svc-fde-"), "docker.sock");
    h = discoveryHarness(yaml(socket));
    await h.start();
    await until("failed", () => h!.status.component("discovery/docker")?.state === "recoverable_error");
    expect(h.status.component("discovery/docker")?.reason).toBe(`docker: connect ENOENT ${socket}`);
    expect(h.view().docker).toEqual({ enabled: true, connected: false, containers: 0 });
    expect(h.status.readiness().checks.discovery).toBe(`failed: docker: connect ENOENT ${socket}`);
    const e = engine(socket);
    e.containers.set(cid("8"), { id: cid("8"), name: "x", image: "x" });
    await until("connected", () => h!.view().docker.connected, 5_000);
    expect(h.status.readiness().checks.discovery).toBe("ok");
    expect(h.view().docker.containers).toBe(1);
  });

  test("enabled: auto without a socket: disabled with the reason, readiness ok; follows the engine once it appears", async () => {
    const socket = join(tempDir("svc-fde-"), "docker.sock");
    h = discoveryHarness(yaml(socket).replace("enabled: true", "enabled: auto"));
    await h.start();
    await until("waiting", () => h!.status.component("discovery/docker")?.state === "disabled");
    expect(h.status.component("discovery/docker")?.reason).toBe(`docker socket ${socket} absent (docker.enabled: auto); waiting for it`);
    expect(h.status.readiness().checks.discovery).toBe("ok");
    expect(h.view().docker).toEqual({ enabled: true, connected: false, containers: 0 });
    const e = engine(socket);
    e.containers.set(cid("e"), { id: cid("e"), name: "appeared", image: "x" });
    await until("connected", () => h!.view().docker.connected, 5_000);
    expect(h.status.component("discovery/docker")?.state).toBe("ok");
    expect(h.view().docker.containers).toBe(1);
    e.stop();
    await until("waiting again once the engine and its socket are gone", () => h!.status.component("discovery/docker")?.state === "disabled" && !h!.view().docker.connected, 5_000);
    expect(h.status.readiness().checks.discovery).toBe("ok");
  });

  test("stream closed by the engine: reconnects and re-lists, so changes made meanwhile are seen", async () => {
    const e = engine();
    e.containers.set(cid("9"), { id: cid("9"), name: "old", image: "x" });
    h = discoveryHarness(yaml(e.socket));
    await h.start();
    await until("connected", () => h!.view().docker.connected);
    e.closeStreams();
    e.containers.delete(cid("9"));
    e.containers.set(cid("a"), { id: cid("a"), name: "new", image: "x" });
    await until("re-listed", () => (e.requests.get("/containers/json") ?? 0) >= 2 && h!.view().docker.connected && h!.parts.workloads.forContainer(cid("a")) !== undefined);
    expect(h.parts.workloads.forContainer(cid("9"))).toBeUndefined();
  });

  test("a failed list ends the session (its event stream included) and the next attempt recovers", async () => {
    const e = engine();
    e.failLists = 1;
    e.containers.set(cid("d"), { id: cid("d"), name: "x", image: "x" });
    h = discoveryHarness(yaml(e.socket));
    await h.start();
    await until("list failure reported", () => h!.status.component("discovery/docker")?.reason === "docker: /containers/json: HTTP 500: injected list failure");
    await until("recovered", () => h!.view().docker.connected);
    expect(e.requests.get("/events")).toBe(2);
    await until("the first stream closed", () => e.openStreams === 1);
  });

  test("reload to another socket switches engines; disabling clears everything; shutdown twice is safe", async () => {
    const one = engine();
    const two = engine();
    one.containers.set(cid("b"), { id: cid("b"), name: "on-one", image: "x" });
    two.containers.set(cid("c"), { id: cid("c"), name: "on-two", image: "x" });
    h = discoveryHarness(yaml(one.socket));
    await h.start();
    await until("one", () => h!.parts.workloads.forContainer(cid("b")) !== undefined);
    await h.reload(yaml(two.socket));
    await until("two", () => h!.parts.workloads.forContainer(cid("c")) !== undefined && h!.view().docker.connected);
    expect(h.parts.workloads.forContainer(cid("b"))).toBeUndefined();
    expect(one.openStreams).toBe(0);
    await h.reload(yaml(two.socket).replace("enabled: true", "enabled: false"));
    expect(h.status.component("discovery/docker")?.state).toBe("disabled");
    expect(h.view().docker).toEqual({ enabled: false, connected: false, containers: 0 });
    await h.parts.docker.shutdown();
    await h.parts.docker.shutdown();
  });

  test("shutdown without start is safe", async () => {
    const fresh = discoveryHarness(yaml("/nonexistent/docker.sock"));
    for (const c of fresh.parts.components) {
      await c.shutdown(AbortSignal.timeout(1000));
      await c.shutdown(AbortSignal.timeout(1000));
    }
  });
});
