import { describe, expect, test } from "bun:test";
import { providerFromHints } from "../../../src/discovery/cloud/hints";
import { dockerAttributes, fromInspect, splitImage } from "../../../src/discovery/docker/containers";
import { podContainerEntries, podReady, trimPod, workloadAttributes, type Pod, type Service } from "../../../src/discovery/kubernetes/pods";
import { dockerServices } from "../../../src/discovery/docker/services";
import { kubernetesServices } from "../../../src/discovery/kubernetes/services";
import { validateDiscovery, DiscoverySchema } from "../../../src/discovery/config";
import { Value } from "@sinclair/typebox/value";

const owned = (kind: string, name: string, labels: Record<string, string> = {}): Pod => ({
  metadata: { name: "p", namespace: "ns", uid: "u", labels, ownerReferences: [{ kind, name, controller: true }] },
});

describe("workload attributes from owner references", () => {
  test.each([
    [owned("ReplicaSet", "web-5d8f7c9b7", { "pod-template-hash": "5d8f7c9b7" }), { "k8s.replicaset.name": "web-5d8f7c9b7", "k8s.deployment.name": "web" }],
    [owned("ReplicaSet", "bare-rs"), { "k8s.replicaset.name": "bare-rs" }],
    [owned("DaemonSet", "agent"), { "k8s.daemonset.name": "agent" }],
    [owned("StatefulSet", "db"), { "k8s.statefulset.name": "db" }],
    [owned("Job", "backup-28474520"), { "k8s.job.name": "backup-28474520", "k8s.cronjob.name": "backup" }],
    [owned("Job", "migrate"), { "k8s.job.name": "migrate" }],
    [{ metadata: { name: "static" } }, {}],
  ])("%#", (pod, expected) => {
    expect(workloadAttributes(pod as Pod)).toEqual(expected);
  });

  test("container entries: only started containers, ids without runtime prefix, init containers too", () => {
    const pod: Pod = {
      metadata: { name: "p", namespace: "ns", uid: "uid-1" },
      spec: { nodeName: "n1", containers: [{ name: "app", image: "nginx:1.27" }] },
      status: {
        phase: "Running",
        conditions: [{ type: "Ready", status: "True" }],
        initContainerStatuses: [{ name: "init", containerID: `cri-o://${"1".repeat(64)}`, image: "busybox" }],
        containerStatuses: [{ name: "app", containerID: `containerd://${"2".repeat(64)}` }, { name: "waiting" }],
      },
    };
    const entries = podContainerEntries(pod, "prod");
    expect(entries.map((e) => e.id)).toEqual(["1".repeat(64), "2".repeat(64)]);
    expect(entries[1]!.attributes).toEqual({
      "k8s.namespace.name": "ns",
      "k8s.pod.name": "p",
      "k8s.pod.uid": "uid-1",
      "k8s.node.name": "n1",
      "k8s.cluster.name": "prod",
      "k8s.container.name": "app",
      "container.id": "2".repeat(64),
      "container.image.name": "nginx",
      "container.image.tags": ["1.27"],
    });
    expect(podReady(pod)).toBe(true);
    expect(podReady({ ...pod, status: { ...pod.status, phase: "Pending" } })).toBe(false);
  });
});

describe("trimPod", () => {
  test("keeps what attributes and services use, drops the rest", () => {
    const full = {
      metadata: { name: "p", namespace: "ns", uid: "u", labels: { app: "a" }, annotations: { big: "x".repeat(1000) }, managedFields: [{ manager: "kubelet" }], ownerReferences: [{ apiVersion: "apps/v1", kind: "ReplicaSet", name: "a-1", uid: "o", controller: true }] },
      spec: { nodeName: "n", volumes: [{ name: "v" }], containers: [{ name: "c", image: "img:1", env: [{ name: "E", value: "v" }] }] },
      status: { phase: "Running", podIP: "10.0.0.1", conditions: [{ type: "Ready", status: "True" }, { type: "PodScheduled", status: "True" }], containerStatuses: [{ name: "c", containerID: `containerd://${"3".repeat(64)}`, ready: true, restartCount: 2 }] },
    } as unknown as Pod;
    const trimmed = trimPod(full);
    expect(podContainerEntries(trimmed, "x")).toEqual(podContainerEntries(full, "x"));
    expect(podReady(trimmed)).toBe(true);
    expect(JSON.stringify(trimmed)).not.toContain("managedFields");
    expect(JSON.stringify(trimmed).length).toBeLessThan(JSON.stringify(full).length / 3);
  });
});

describe("discovered services", () => {
  const pod = (name: string, ns: string, labels: Record<string, string>, ready = true): Pod => ({
    metadata: { name, namespace: ns, labels },
    status: { phase: "Running", conditions: [{ type: "Ready", status: ready ? "True" : "False" }] },
  });

  test("Kubernetes: ready pods matching every selector pair in the same namespace; ports sorted and unique", () => {
    const pods = [pod("a", "shop", { app: "web", tier: "fe" }), pod("b", "shop", { app: "web", tier: "be" }), pod("c", "shop", { app: "web", tier: "fe" }, false), pod("d", "other", { app: "web", tier: "fe" })];
    const services: Service[] = [
      { metadata: { name: "web", namespace: "shop" }, spec: { selector: { app: "web", tier: "fe" }, ports: [{ port: 443 }, { port: 80 }, { port: 80 }] } },
      { metadata: { name: "all", namespace: "shop" }, spec: { selector: { app: "web" }, ports: [] } },
      { metadata: { name: "external", namespace: "shop" }, spec: { ports: [{ port: 5432 }] } },
    ];
    expect(kubernetesServices(services, pods)).toEqual([
      { name: "all", namespace: "shop", instances: 2, ports: [] },
      { name: "external", namespace: "shop", instances: 0, ports: [5432] },
      { name: "web", namespace: "shop", instances: 1, ports: [80, 443] },
    ]);
  });

  test("Docker: grouped by compose service (namespace = project), else by image name; published ports", () => {
    const c = (id: string, image: string, labels: Record<string, string>, ports: number[]) => ({ id, name: id, image, labels, pid: 1, publishedPorts: ports });
    expect(
      dockerServices([
        c("1", "shop/web:2", { "com.docker.compose.service": "web", "com.docker.compose.project": "shop" }, [8080]),
        c("2", "shop/web:2", { "com.docker.compose.service": "web", "com.docker.compose.project": "shop" }, [8081]),
        c("3", "redis:7", {}, []),
        c("4", "redis:6", {}, [6379]),
      ]),
    ).toEqual([
      { name: "redis", namespace: "docker", instances: 2, ports: [6379] },
      { name: "web", namespace: "shop", instances: 2, ports: [8080, 8081] },
    ]);
  });
});

describe("docker records", () => {
  test.each([
    ["busybox", "busybox", undefined],
    ["busybox:1.36", "busybox", "1.36"],
    ["registry.local:5000/ns/app:2.0", "registry.local:5000/ns/app", "2.0"],
    ["registry.local:5000/ns/app", "registry.local:5000/ns/app", undefined],
    ["app@sha256:abcd", "app", undefined],
    ["sha256:0123", "sha256:0123", undefined],
  ])("splitImage(%s)", (image, name, tag) => {
    expect(splitImage(image)).toEqual({ name, tag });
  });

  test("inspect -> record -> attributes, published ports from the bindings", () => {
    const c = fromInspect({
      Id: "f".repeat(64),
      Name: "/api",
      Image: "sha256:1",
      State: { Running: true, Pid: 4321 },
      Config: { Image: "shop/api:3", Labels: { team: "core" } },
      NetworkSettings: { Ports: { "80/tcp": [{ HostIp: "0.0.0.0", HostPort: "8080" }, { HostIp: "::", HostPort: "8080" }], "9090/tcp": null } },
    });
    expect(c).toEqual({ id: "f".repeat(64), name: "api", image: "shop/api:3", labels: { team: "core" }, pid: 4321, publishedPorts: [8080] });
    expect(dockerAttributes(c)).toEqual({
      "container.id": "f".repeat(64),
      "container.name": "api",
      "container.image.name": "shop/api",
      "container.image.tags": ["3"],
      "container.runtime": "docker",
      "container.label.team": "core",
    });
  });
});

describe("cloud hints", () => {
  test.each([
    [{ "sys/class/dmi/id/sys_vendor": "Amazon EC2" }, "aws"],
    [{ "sys/class/dmi/id/board_vendor": "Amazon EC2" }, "aws"],
    [{ "sys/hypervisor/uuid": "ec2a6f2b-0000-0000-0000-000000000000" }, "aws"],
    [{ "sys/class/dmi/id/product_name": "Google Compute Engine" }, "gcp"],
    [{ "sys/class/dmi/id/chassis_asset_tag": "7783-7084-3265-9085-8269-3286-77" }, "azure"],
    [{ "sys/class/dmi/id/sys_vendor": "Microsoft Corporation", "sys/class/dmi/id/product_name": "Virtual Machine" }, "azure"],
    [{ "sys/class/dmi/id/sys_vendor": "QEMU", "sys/class/dmi/id/product_name": "Standard PC (Q35 + ICH9, 2009)" }, undefined],
    [{ "sys/class/dmi/id/sys_vendor": "LENOVO" }, undefined],
    [{}, undefined],
  ])("%j -> %s", (hints, expected) => {
    expect(providerFromHints(hints)).toBe(expected as never);
  });
});

describe("config", () => {
  const defaults = () => Value.Default(DiscoverySchema, {}) as ReturnType<typeof Value.Decode<typeof DiscoverySchema>>;
  test("defaults are valid", () => {
    expect(validateDiscovery(defaults())).toEqual([]);
  });
  test("rejects a metadata address that is not an http(s) base and zero durations, naming the key", () => {
    const d = defaults();
    d.cloud.endpoints.aws = "169.254.169.254";
    d.cloud.endpoints.gcp = "http://x/?q=1";
    d.cloud.timeout = "0";
    d.docker.socket = " ";
    // Each source's rules, in the order of the sources (kubernetes, docker, cloud).
    expect(validateDiscovery(d).map((p) => p.path)).toEqual([
      "agent.discovery.docker.socket",
      "agent.discovery.cloud.endpoints.aws",
      "agent.discovery.cloud.endpoints.gcp",
      "agent.discovery.cloud.timeout",
    ]);
  });
});
