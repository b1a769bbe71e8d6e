import { describe, expect, test } from "bun:test";
import { cgroupIdDecides, containerIdFromCgroup, ProcessTable, type ProcSource } from "../../../src/ebpf/process-table";
import type { ProcessEvent } from "../../../src/ebpf/sets/process-decoder";

const ID = "a".repeat(40) + "0123456789abcdef01234567";

/** `inodes`: the cgroup v2 id of each v2 path (what the cgroup2 mount's directory inode gives); the docker one is 77. */
function proc(cgroups: Record<number, string> = {}, exes: Record<number, string> = {}, inodes: Record<string, bigint> = { [`/docker/${ID}`]: 77n }): ProcSource {
  return {
    cgroupPath: (pid) => cgroups[pid],
    cgroupInode: (path) => inodes[path],
    exe: (pid) => exes[pid],
    stat: (pid) => (cgroups[pid] !== undefined ? { ppid: 1, comm: `p${pid}`, uid: 0 } : undefined),
    pids: () => Object.keys(cgroups).map(Number),
  };
}

const exec = (pid: number, over: Partial<ProcessEvent> = {}): ProcessEvent => ({
  kind: "exec", timestampNs: 1n, cgroupId: 77n, pid, tid: pid, ppid: 1, uid: 0, exitCode: 0, comm: "nginx", filename: "/usr/sbin/nginx", ...over,
});

describe("containerIdFromCgroup", () => {
  test("docker, systemd scopes, containerd and cri-o layouts; v1 lines on hybrid hosts", () => {
    expect(containerIdFromCgroup(`0::/docker/${ID}`)).toBe(ID);
    expect(containerIdFromCgroup(`0::/system.slice/docker-${ID}.scope`)).toBe(ID);
    expect(containerIdFromCgroup(`0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-${ID}.scope`)).toBe(ID);
    expect(containerIdFromCgroup(`0::/kubepods/besteffort/pod1/crio-${ID}.scope`)).toBe(ID);
    expect(containerIdFromCgroup(`4:memory:/docker/${ID}\n0::/\n`)).toBe(ID);
    expect(containerIdFromCgroup("0::/user.slice/session-1.scope")).toBeUndefined();
    expect(containerIdFromCgroup("4:memory:/process_api/8b097c472734f1da9a326c9ed9013344\n0::/")).toBeUndefined();
  });
});

describe("ProcessTable", () => {
  test("exec adds a process with its executable and container; exit keeps it findable as exited", () => {
    const t = new ProcessTable(proc({ 10: `0::/docker/${ID}` }));
    t.apply(exec(10));
    expect(t.forPid(10)).toMatchObject({ pid: 10, ppid: 1, executable: "/usr/sbin/nginx", executableName: "nginx", containerId: ID, exitedAtNs: undefined });
    t.apply({ ...exec(10), kind: "exit", timestampNs: 99n, filename: "" });
    expect(t.size).toBe(0);
    expect(t.forPid(10)?.exitedAtNs).toBe(99n);
    expect(t.forPid(10)?.executableName).toBe("nginx");
  });

  test("a process gone before it is read inherits its parent's container; cgroup answers are cached", () => {
    const t = new ProcessTable(proc({ 10: `0::/docker/${ID}` }));
    t.apply(exec(10));
    t.apply(exec(11, { ppid: 10 }));
    expect(t.forPid(11)?.containerId).toBe(ID);
    t.apply(exec(12, { ppid: 99 }));
    expect(t.forPid(12)?.containerId).toBe(ID);
  });

  test("a process moved into a container's cgroup after its exec (runc's first process) does not make its old cgroup the container's", () => {
    // The exec reports the host cgroup's id (5); /proc, read after the move, shows the container's path (id 77).
    const t = new ProcessTable(proc({ 20: `0::/docker/${ID}`, 21: "0::/user.slice/session-1.scope" }, {}, { [`/docker/${ID}`]: 77n, "/user.slice/session-1.scope": 5n }));
    t.apply(exec(20, { cgroupId: 5n, filename: "/bin/busybox" }));
    expect(t.forPid(20)?.containerId).toBe(ID);
    // A later process of the host cgroup (a shell's curl) is the host's, whether it execs or is forked.
    t.apply(exec(21, { cgroupId: 5n, ppid: 99, filename: "/usr/bin/curl" }));
    expect(t.forPid(21)?.containerId).toBeUndefined();
    t.apply({ ...exec(22, { cgroupId: 5n, ppid: 21 }), kind: "fork" });
    expect(t.forPid(22)?.containerId).toBeUndefined();
    // The host cgroup's own answer is remembered (its path is that cgroup): a process gone before it is read keeps it.
    t.apply(exec(23, { cgroupId: 5n, ppid: 98, filename: "/usr/bin/curl" }));
    expect(t.forPid(23)?.containerId).toBeUndefined();
  });

  test("hybrid host (v1 hierarchies beside 0::/): one v2 cgroup id for host and container processes, each keeps its own answer", () => {
    const host = "4:memory:/process_api/8b097c472734f1da9a326c9ed9013344\n1:cpu:/\n0::/\n";
    const container = `4:memory:/docker/${ID}\n1:cpu:/docker/${ID}\n0::/\n`;
    // The container's process first, then a host process with the same v2 cgroup id.
    const a = new ProcessTable(proc({ 10: container, 11: host }));
    a.apply(exec(10, { cgroupId: 1n }));
    a.apply(exec(11, { cgroupId: 1n, ppid: 99, filename: "/usr/bin/python3" }));
    expect(a.forPid(10)?.containerId).toBe(ID);
    expect(a.forPid(11)?.containerId).toBeUndefined();
    // And the other way round.
    const b = new ProcessTable(proc({ 10: container, 11: host }));
    b.apply(exec(11, { cgroupId: 1n, ppid: 99, filename: "/usr/bin/python3" }));
    b.apply(exec(10, { cgroupId: 1n }));
    expect(b.forPid(11)?.containerId).toBeUndefined();
    expect(b.forPid(10)?.containerId).toBe(ID);
  });

  test("cgroupIdDecides: a pure v2 host, or a v2 path that names the container", () => {
    expect(cgroupIdDecides(`0::/docker/${ID}\n`)).toBe(true);
    expect(cgroupIdDecides("0::/user.slice/session-1.scope\n")).toBe(true);
    expect(cgroupIdDecides(`4:memory:/docker/${ID}\n0::/docker/${ID}\n`)).toBe(true);
    expect(cgroupIdDecides(`4:memory:/docker/${ID}\n0::/\n`)).toBe(false);
    expect(cgroupIdDecides("4:memory:/\n0::/\n")).toBe(false);
  });

  test("relative exec paths resolve through /proc/<pid>/exe", () => {
    const t = new ProcessTable(proc({ 5: "0::/" }, { 5: "/opt/app/bin/server" }));
    t.apply(exec(5, { filename: "./server", cgroupId: 0n }));
    expect(t.forPid(5)?.executable).toBe("/opt/app/bin/server");
    expect(t.forPid(5)?.containerId).toBeUndefined();
  });

  test("bounded: the oldest process is evicted and counted", () => {
    const t = new ProcessTable(proc(), 3, 2);
    for (let pid = 1; pid <= 5; pid++) t.apply(exec(pid, { cgroupId: 0n }));
    expect(t.size).toBe(3);
    expect(t.evicted).toBe(2);
    expect(t.forPid(1)).toBeUndefined();
    expect(t.forPid(5)).toBeDefined();
    for (let pid = 3; pid <= 5; pid++) t.apply({ ...exec(pid), kind: "exit" });
    expect(t.forPid(3)).toBeUndefined();
    expect(t.forPid(5)?.exitedAtNs).toBe(1n);
  });

  test("seed reads running processes from /proc", () => {
    const t = new ProcessTable(proc({ 1: "0::/", 42: `0::/docker/${ID}` }, { 42: "/usr/bin/redis-server" }));
    expect(t.seed()).toBe(2);
    expect(t.forPid(42)).toMatchObject({ comm: "p42", executableName: "redis-server", containerId: ID });
    expect(t.forPid(1)?.executableName).toBe("p1");
  });
});
