import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ContainerDirectory } from "../../../src/discovery/directory";
import { layoutOf, ProcessTable, type ProcSource } from "../../../src/ebpf/process-table";
import { ResourceBuilder } from "../../../src/export/resource";
import { EnvironReader, otelEnvironmentOf, parseResourceAttributes } from "../../../src/workloads/environ";
import { identityAttributes, serviceNameOf, UNKNOWN_WORKLOAD, type IdentityInput } from "../../../src/workloads/identity";
import { WorkloadRegistry } from "../../../src/workloads/registry";

const CID = "ab".repeat(32);
const enc = new TextEncoder();
const environ = (...vars: string[]) => enc.encode(vars.join("\0") + "\0");

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A fake /proc: per pid stat, status, exe link, cgroup and environ. */
function fakeProc(procs: Record<number, { ppid?: number; comm: string; exe?: string; cgroup?: string; env?: string[] }>): string {
  const root = mkdtempSync(join(tmpdir(), "svc-proc-"));
  dirs.push(root);
  for (const [pid, p] of Object.entries(procs)) {
    const d = join(root, pid);
    mkdirSync(d);
    writeFileSync(join(d, "stat"), `${pid} (${p.comm}) S ${p.ppid ?? 1} 0 0`);
    writeFileSync(join(d, "status"), "Uid:\t0\t0\t0\t0\n");
    if (p.exe) symlinkSync(p.exe, join(d, "exe"));
    writeFileSync(join(d, "cgroup"), p.cgroup ?? "0::/user.slice\n");
    writeFileSync(join(d, "environ"), environ(...(p.env ?? [])));
  }
  return root;
}

describe("environment", () => {
  test("only OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are decoded; pairs percent-decoded, malformed ones skipped", () => {
    const env = otelEnvironmentOf(environ("PATH=/bin", "SECRET_TOKEN=hunter2", "OTEL_SERVICE_NAME=checkout", "OTEL_RESOURCE_ATTRIBUTES=service.namespace=shop,deployment.environment=prod%2Ceu,bad,=x", "OTEL_OTHER=1"));
    expect(env).toEqual({ serviceName: "checkout", resourceAttributes: { "service.namespace": "shop", "deployment.environment": "prod,eu" } });
    expect(JSON.stringify(env)).not.toContain("hunter2");
    expect(parseResourceAttributes("service.name=a%ZZ,k=v")).toEqual({ k: "v" });
    expect(otelEnvironmentOf(environ("HOME=/root"))).toEqual({});
  });

  test("the read is bounded: variables beyond the first bytes are not seen", () => {
    const root = fakeProc({ 7: { comm: "x", env: ["OTEL_SERVICE_NAME=early", "FILLER=" + "y".repeat(200), "OTEL_RESOURCE_ATTRIBUTES=late=1"] } });
    expect(new EnvironReader(root, 128).read(7)).toEqual({ serviceName: "early" });
    expect(new EnvironReader(root).read(7)).toEqual({ serviceName: "early", resourceAttributes: { late: "1" } });
    expect(new EnvironReader(root).read(8)).toBeUndefined();
  });
});

describe("service.name order", () => {
  const base: IdentityInput = { pid: 42, executable: "/usr/bin/python3.11", executableName: "python3.11", env: {}, containerId: undefined, container: undefined, hostName: "node-1" };
  const k8s = { "k8s.namespace.name": "shop", "k8s.pod.name": "web-5d8f7c9b7-x2x9z", "k8s.container.name": "app", "k8s.deployment.name": "web", "k8s.replicaset.name": "web-5d8f7c9b7", "container.id": CID, "k8s.pod.label.app.kubernetes.io/name": "storefront" };
  test.each([
    ["OTEL_SERVICE_NAME first", { env: { serviceName: "a", resourceAttributes: { "service.name": "b" } }, container: k8s }, "a", "env:OTEL_SERVICE_NAME"],
    ["then service.name in OTEL_RESOURCE_ATTRIBUTES", { env: { resourceAttributes: { "service.name": "b" } }, container: k8s }, "b", "env:OTEL_RESOURCE_ATTRIBUTES"],
    ["then the app.kubernetes.io/name label", { container: k8s }, "storefront", "k8s:label"],
    ["then the owning Deployment", { container: { ...k8s, "k8s.pod.label.app.kubernetes.io/name": undefined } }, "web", "k8s:owner"],
    ["a StatefulSet", { container: { "k8s.pod.name": "db-0", "k8s.statefulset.name": "db", "k8s.container.name": "pg" } }, "db", "k8s:owner"],
    ["a DaemonSet", { container: { "k8s.daemonset.name": "agent", "k8s.container.name": "c" } }, "agent", "k8s:owner"],
    ["a Job", { container: { "k8s.job.name": "migrate", "k8s.container.name": "c" } }, "migrate", "k8s:owner"],
    ["then the Kubernetes container name", { container: { "k8s.pod.name": "bare", "k8s.container.name": "sidecar" } }, "sidecar", "container"],
    ["the Docker container name", { container: { "container.name": "shop-web-1", "container.id": CID } }, "shop-web-1", "container"],
    ["then the executable name", {}, "python3.11", "executable"],
  ] as const)("%s", (_what, over, name, source) => {
    const container = "container" in over ? (Object.fromEntries(Object.entries(over.container).filter(([, v]) => v !== undefined)) as Record<string, string>) : undefined;
    expect(serviceNameOf({ ...base, ...over, container } as IdentityInput)).toEqual({ name, source });
  });

  test("namespace and instance id: declared, else Kubernetes, else container, else host:pid; observed facts win over declared ones", () => {
    expect(identityAttributes({ ...base, container: k8s })).toMatchObject({
      "service.name": "storefront",
      "service.namespace": "shop",
      "service.instance.id": "shop.web-5d8f7c9b7-x2x9z.app",
      "process.pid": 42,
      "process.executable.name": "python3.11",
      "process.executable.path": "/usr/bin/python3.11",
      "container.id": CID,
      "k8s.deployment.name": "web",
    });
    expect(identityAttributes({ ...base, containerId: CID })).toMatchObject({ "service.name": "python3.11", "service.instance.id": `${CID}/42`, "container.id": CID });
    const plain = identityAttributes({ ...base, env: { resourceAttributes: { "service.namespace": "team", "process.pid": "1", "deployment.environment": "prod" } } });
    expect(plain).toMatchObject({ "service.namespace": "team", "service.instance.id": "node-1:42", "process.pid": 42, "deployment.environment": "prod" });
  });
});

describe("registry", () => {
  const cgroup = `0::/system.slice/docker-${CID}.scope\n`;

  test("one resource object per process image, rebuilt when discovery learns the container; forked children share it; the environment is read once", () => {
    const root = fakeProc({
      100: { comm: "httpd", exe: "/bin/busybox", cgroup, env: ["PATH=/bin"] },
      101: { ppid: 100, comm: "httpd", exe: "/bin/busybox", cgroup },
      200: { comm: "python3", exe: "/usr/bin/python3.11", env: ["OTEL_SERVICE_NAME=orders", "API_KEY=s3cret"] },
    });
    const directory = new ContainerDirectory({ procRoot: root });
    const reg = new WorkloadRegistry(directory, { procRoot: root, selfPid: 1, hostName: "node-1" });
    const before = reg.forPid(100)!;
    expect(before).toMatchObject({ "service.name": "busybox", "container.id": CID, "process.pid": 100 });
    expect(reg.forPid(100)).toBe(before);
    expect(reg.forPid(101)).toBe(before);
    directory.set("docker", { id: CID, attributes: { "container.id": CID, "container.name": "web", "container.image.name": "svc-busybox" } });
    const after = reg.forPid(101)!;
    expect(after).not.toBe(before);
    expect(after).toMatchObject({ "service.name": "web", "container.name": "web", "container.image.name": "svc-busybox", "process.pid": 100 });
    expect(reg.forPid(100)).toBe(after);
    const py = reg.forPid(200)!;
    expect(py).toMatchObject({ "service.name": "orders", "process.executable.name": "python3.11", "service.instance.id": "node-1:200" });
    expect(JSON.stringify(py)).not.toContain("s3cret");
    expect(reg.forPid(200)).toBe(py);
    expect(reg.environReads).toBe(2);
    // The agent itself: its own resource; a pid nothing knows: unknown_service.
    expect(reg.forPid(1)).toBeUndefined();
    expect(reg.forPid(999)).toBe(UNKNOWN_WORKLOAD);
  });

  test("the resource of a container's logs (no process): named from what discovery knows", () => {
    const directory = new ContainerDirectory({ procRoot: "/nonexistent" });
    const reg = new WorkloadRegistry(directory, { procRoot: "/nonexistent", selfPid: 1, hostName: "node-1" });
    directory.set("docker", { id: CID, attributes: { "container.id": CID, "container.name": "web" } });
    const r = reg.resourceOfContainer(CID);
    expect(r).toEqual({ "service.name": "web", "service.instance.id": CID, "container.id": CID, "container.name": "web" });
    expect(reg.resourceOfContainer(CID)).toBe(r);
  });

  test("exported: the workload's resource over the host layer, never the agent's service.name or SDK", () => {
    const b = new ResourceBuilder("svc-agent");
    b.set("discovery/cloud", { "cloud.provider": "aws" });
    const workload = { "service.name": "orders", "process.pid": 200 };
    expect(b.workloadAttributes(workload)).toEqual({ "host.name": expect.any(String), "os.type": "linux", "cloud.provider": "aws", "service.name": "orders", "process.pid": 200 });
    expect(b.attributes()).toMatchObject({ "service.name": "svc-agent", "telemetry.sdk.name": "svc-agent", "cloud.provider": "aws" });
  });
});

describe("process table", () => {
  const proc = (p: Record<number, { ppid?: number; comm: string; exe?: string; cgroup?: string; layout?: string }>): ProcSource => ({
    cgroupPath: (pid) => (p[pid] ? (p[pid]!.cgroup ?? "0::/") : undefined),
    exe: (pid) => p[pid]?.exe,
    stat: (pid) => (p[pid] ? { ppid: p[pid]!.ppid ?? 1, comm: p[pid]!.comm, uid: 0, layout: p[pid]!.layout } : undefined),
    pids: () => Object.keys(p).map(Number),
  });
  const ev = (kind: "exec" | "fork" | "exit", pid: number, over: Record<string, unknown> = {}) => ({ kind, timestampNs: 1n, cgroupId: 5n, pid, tid: pid, ppid: 1, uid: 0, exitCode: 0, comm: "x", filename: "", ...over }) as never;

  test("names come from /proc/<pid>/exe at exec time and when seeded alike; runc's memfd and descriptor paths are never names", () => {
    const p = { 10: { comm: "python3", exe: "/usr/bin/python3.11" }, 11: { comm: "httpd", exe: "/memfd:runc_cloned:/proc/self/exe (deleted)" }, 12: { comm: "app", exe: "/opt/app (deleted)" } };
    const live = new ProcessTable(proc(p));
    live.apply(ev("exec", 10, { filename: "/usr/bin/python3", comm: "python3" }));
    live.apply(ev("exec", 11, { filename: "/proc/self/exe", comm: "httpd" }));
    live.apply(ev("exec", 12, { filename: "/dev/fd/5", comm: "app" }));
    const seeded = new ProcessTable(proc(p));
    seeded.seed();
    for (const pid of [10, 11, 12]) expect(seeded.forPid(pid)!.executableName).toBe(live.forPid(pid)!.executableName);
    expect([10, 11, 12].map((pid) => live.forPid(pid)!.executableName)).toEqual(["python3.11", "httpd", "app"]);
  });

  test("forked children share their parent's image (executable, container) live, when seeded, and when read from /proc on a miss", () => {
    const cg = `0::/docker/${CID}`;
    const p = { 20: { comm: "httpd", exe: "/bin/busybox", cgroup: cg }, 21: { ppid: 20, comm: "httpd", exe: "/bin/busybox", cgroup: cg }, 22: { ppid: 20, comm: "sh", exe: "/bin/dash", cgroup: cg } };
    const live = new ProcessTable(proc(p));
    live.apply(ev("exec", 20, { comm: "httpd" }));
    live.apply(ev("fork", 21, { ppid: 20, comm: "httpd" }));
    expect(live.forPid(21)!.image).toBe(live.forPid(20)!.image);
    expect(live.forPid(21)!.containerId).toBe(CID);
    // A child forked and gone before the table saw it: its exit names the parent.
    live.apply(ev("exit", 30, { ppid: 20, comm: "httpd" }));
    expect(live.forPid(30)!.image).toBe(live.forPid(20)!.image);
    // A miss is read from /proc: same program as the parent -> the parent's image; another program -> its own.
    const lazy = new ProcessTable(proc(p));
    lazy.apply(ev("exec", 20, { comm: "httpd" }));
    expect(lazy.lookup(21)!.image).toBe(lazy.forPid(20)!.image);
    expect(lazy.lookup(22)!.image.executableName).toBe("dash");
    expect(lazy.lookup(99)).toBeUndefined();
    const seeded = new ProcessTable(proc(p));
    seeded.seed();
    expect(seeded.forPid(21)!.image).toBe(seeded.forPid(20)!.image);
    expect(seeded.forPid(22)!.image).not.toBe(seeded.forPid(20)!.image);
  });
  test("a child that exec'd its parent's program (same executable, new address-space layout) is its own image when seeded or read from /proc", () => {
    const bun = "/opt/bun/bin/bun.exe";
    // 30 runs the tests; 31 is a server it started (vfork + exec of the same binary); 32 a worker 31 forked.
    const p = { 30: { comm: "bun", exe: bun, layout: "a:b:c:d" }, 31: { ppid: 30, comm: "bun", exe: bun, layout: "e:f:g:h" }, 32: { ppid: 31, comm: "bun", exe: bun, layout: "e:f:g:h" } };
    const seeded = new ProcessTable(proc(p));
    seeded.seed();
    expect(seeded.forPid(31)!.image).not.toBe(seeded.forPid(30)!.image);
    expect(seeded.forPid(31)!.image.pid).toBe(31);
    expect(seeded.forPid(32)!.image).toBe(seeded.forPid(31)!.image);
    const lazy = new ProcessTable(proc(p));
    lazy.apply(ev("exec", 30, { comm: "bun", filename: bun }));
    expect(lazy.lookup(31)!.image.pid).toBe(31);
    expect(lazy.lookup(32)!.image).toBe(lazy.forPid(31)!.image);
    // A seed after events: the parent already in the table is compared by its layout read now.
    const later = new ProcessTable(proc(p));
    later.apply(ev("exec", 30, { comm: "bun", filename: bun }));
    later.seed();
    expect(later.forPid(31)!.image.pid).toBe(31);
    expect(later.forPid(32)!.image).toBe(later.forPid(31)!.image);
  });

  test("a fork delivered after the child's exec (per-CPU perf buffers) does not undo the exec", () => {
    const p = { 40: { comm: "bun", exe: "/opt/bun" }, 41: { ppid: 40, comm: "bun", exe: "/opt/bun" } };
    const t = new ProcessTable(proc(p));
    t.apply(ev("exec", 40, { comm: "bun", filename: "/opt/bun" }));
    t.apply(ev("exec", 41, { ppid: 40, comm: "bun", filename: "/opt/bun" }));
    t.apply(ev("fork", 41, { ppid: 40, comm: "bun" }));
    expect(t.forPid(41)!.image.pid).toBe(41);
    // In order, the fork first: the child shares its parent's image until its exec.
    const inOrder = new ProcessTable(proc(p));
    inOrder.apply(ev("exec", 40, { comm: "bun", filename: "/opt/bun" }));
    inOrder.apply(ev("fork", 41, { ppid: 40, comm: "bun" }));
    expect(inOrder.forPid(41)!.image).toBe(inOrder.forPid(40)!.image);
    inOrder.apply(ev("exec", 41, { ppid: 40, comm: "bun", filename: "/opt/bun" }));
    expect(inOrder.forPid(41)!.image.pid).toBe(41);
  });

  test("layoutOf reads start_code, start_stack, arg_start and env_start from /proc/<pid>/stat; zeros (hidden) are unknown", () => {
    const line = readFileSync("/proc/self/stat", "utf8");
    const fields = line.slice(line.lastIndexOf(")") + 2).trim().split(" ");
    expect(layoutOf(fields)).toMatch(/^\d+:\d+:\d+:\d+$/);
    expect(layoutOf(fields.map((f, i) => (i === 25 ? "0" : f)))).toBeUndefined();
    expect(layoutOf(fields.slice(0, 30))).toBeUndefined();
  });
});

describe("process table after a restart", () => {
  test("a child forked from a seeded parent (no cgroup id known) and gone before its cgroup is read keeps the parent's container", () => {
    const cg = `0::/docker/${CID}`;
    let alive = true;
    const t = new ProcessTable({
      cgroupPath: (pid) => (pid === 20 || (pid === 21 && alive) ? cg : undefined),
      exe: (pid) => (pid === 20 ? "/bin/busybox" : undefined),
      stat: (pid) => (pid === 20 ? { ppid: 1, comm: "httpd", uid: 0 } : undefined),
      pids: () => [20],
    });
    t.seed();
    alive = false;
    t.apply({ kind: "fork", timestampNs: 1n, cgroupId: 99n, pid: 21, tid: 21, ppid: 20, uid: 0, exitCode: 0, comm: "httpd", filename: "" });
    expect(t.forPid(21)!.image).toBe(t.forPid(20)!.image);
    expect(t.forPid(21)!.containerId).toBe(CID);
  });
});

describe("documentation", () => {
  test("the configuration reference (`help config`, README) and the README state the service.name order", async () => {
    const { configReferenceMarkdown } = await import("../../../src/config/reference");
    const order = ["OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "app.kubernetes.io/name", "Deployment", "StatefulSet", "DaemonSet", "container name", "executable name"];
    const row = configReferenceMarkdown().split("\n").find((l) => l.startsWith("| `service_name`"))!;
    const at = (text: string) => order.map((w) => text.indexOf(w));
    expect(at(row).every((i, k, all) => i >= 0 && (k === 0 || i > all[k - 1]!))).toBe(true);
    const readme = await Bun.file(join(import.meta.dir, "../../../README.md")).text();
    const section = readme.slice(readme.indexOf("## Workload identity"), readme.indexOf("## Command line"));
    expect(at(section).every((i, k, all) => i >= 0 && (k === 0 || i > all[k - 1]!))).toBe(true);
  });
});
