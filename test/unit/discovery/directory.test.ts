import { afterAll, describe, expect, test } from "bun:test";
import { removeTempDirs, tempDir } from "../../helpers/discovery-harness";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { containerIdFromCgroup } from "../../../src/discovery/cgroup";
import { ContainerDirectory, normalizeContainerId, PID_NEGATIVE_TTL_MS, PID_POSITIVE_TTL_MS } from "../../../src/discovery/directory";

const A = "a".repeat(64);
const B = "0123456789abcdef".repeat(4);

afterAll(() => removeTempDirs());

function procTree(pids: Record<number, string>): string {
  const root = tempDir("svc-proc-");
  for (const [pid, text] of Object.entries(pids)) {
    mkdirSync(join(root, pid));
    writeFileSync(join(root, pid, "cgroup"), text);
  }
  return root;
}

describe("containerIdFromCgroup", () => {
  test.each([
    ["docker cgroup v1", `12:pids:/docker/${A}\n1:name=systemd:/docker/${A}\n0::/docker/${A}\n`, A],
    ["docker systemd driver v2", `0::/system.slice/docker-${B}.scope\n`, B],
    ["containerd CRI", `0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7c1d.slice/cri-containerd-${B}.scope\n`, B],
    ["cri-o", `0::/kubepods.slice/kubepods-pod1.slice/crio-${A}.scope\n`, A],
    ["kubepods cgroupfs v1", `4:memory:/kubepods/besteffort/pod0b2b/${B}\n`, B],
    ["host process", "0::/user.slice/user-0.slice/session-1.scope\n", undefined],
    ["container's own namespace root", "0::/\n", undefined],
    ["a 64-hex-digit part of a longer name is not an id", `0::/system.slice/x${A}y.service\n`, undefined],
  ])("%s", (_name, text, expected) => {
    expect(containerIdFromCgroup(text)).toBe(expected);
  });
});

describe("ContainerDirectory", () => {
  test("merges what Docker and Kubernetes know about the same container; ids normalised", () => {
    const d = new ContainerDirectory({ procRoot: procTree({}) });
    d.set("docker", { id: A, attributes: { "container.name": "k8s_app_web", "container.runtime": "docker" } });
    d.set("kubernetes", { id: `docker://${A.toUpperCase()}`, attributes: { "k8s.pod.name": "web" } });
    expect(d.forContainer(A)).toEqual({ "container.name": "k8s_app_web", "container.runtime": "docker", "k8s.pod.name": "web" });
    expect(normalizeContainerId(`containerd://${A}`)).toBe(A);
    d.remove("kubernetes", A);
    expect(d.forContainer(A)).toEqual({ "container.name": "k8s_app_web", "container.runtime": "docker" });
    d.remove("docker", A);
    expect(d.forContainer(A)).toBeUndefined();
  });

  test("forPid: the runtime's main pid first, then /proc/<pid>/cgroup; unknown containers give undefined", () => {
    const d = new ContainerDirectory({ procRoot: procTree({ 10: `0::/docker/${A}\n`, 11: `0::/docker/${B}\n`, 12: "0::/init.scope\n" }) });
    d.set("docker", { id: A, attributes: { "container.name": "a" }, pid: 99 });
    expect(d.forPid(99)).toEqual({ "container.name": "a" });
    expect(d.forPid(10)).toEqual({ "container.name": "a" });
    expect(d.forPid(11)).toBeUndefined();
    expect(d.containerIdOf(11)).toBe(B);
    d.set("docker", { id: B, attributes: { "container.name": "b" } });
    expect(d.forPid(11)).toEqual({ "container.name": "b" });
    expect(d.forPid(12)).toBeUndefined();
    expect(d.forPid(424242)).toBeUndefined();
  });

  test("pid cache: bounded, entries expire, dropped when their container goes away, forgetPid", () => {
    let now = 1_000;
    const pids: Record<number, string> = {};
    for (let p = 1; p <= 50; p++) pids[p] = `0::/docker/${A}\n`;
    const root = procTree(pids);
    const d = new ContainerDirectory({ procRoot: root, maxPidEntries: 10, now: () => now });
    d.set("docker", { id: A, attributes: { n: 1 } });
    for (let p = 1; p <= 50; p++) expect(d.forPid(p)).toEqual({ n: 1 });
    expect(d.pidCacheSize).toBe(10);
    d.remove("docker", A);
    expect(d.pidCacheSize).toBe(0);

    d.set("docker", { id: A, attributes: { n: 1 } });
    writeFileSync(join(root, "1/cgroup"), "0::/init.scope\n");
    expect(d.forPid(2)).toEqual({ n: 1 });
    expect(d.forPid(1)).toBeUndefined();
    writeFileSync(join(root, "1/cgroup"), `0::/docker/${A}\n`);
    expect(d.forPid(1)).toBeUndefined();
    now += PID_NEGATIVE_TTL_MS + 1;
    expect(d.forPid(1)).toEqual({ n: 1 });
    writeFileSync(join(root, "2/cgroup"), "0::/init.scope\n");
    d.forgetPid(2);
    expect(d.forPid(2)).toBeUndefined();
    expect(d.forPid(3)).toEqual({ n: 1 });
    writeFileSync(join(root, "3/cgroup"), "0::/init.scope\n");
    expect(d.forPid(3)).toEqual({ n: 1 });
    now += PID_POSITIVE_TTL_MS + 1;
    expect(d.forPid(3)).toBeUndefined();
  });

  test("replace() after a re-list removes containers that are gone and their pids", () => {
    const d = new ContainerDirectory({ procRoot: procTree({ 7: `0::/docker/${B}\n` }) });
    d.replace("docker", [{ id: A, attributes: { n: "a" } }, { id: B, attributes: { n: "b" } }]);
    expect(d.forPid(7)).toEqual({ n: "b" });
    d.replace("docker", [{ id: A, attributes: { n: "a2" } }]);
    expect(d.forContainer(A)).toEqual({ n: "a2" });
    expect(d.forContainer(B)).toBeUndefined();
    expect(d.pidCacheSize).toBe(0);
    expect(d.size("docker")).toBe(1);
    d.clear("docker");
    expect(d.size("docker")).toBe(0);
  });
});
