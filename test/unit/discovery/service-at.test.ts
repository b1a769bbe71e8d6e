/** ContainerDirectory.serviceAt: the service name of a container or pod address, for the network collector's service.peer.name. */
import { describe, expect, test } from "bun:test";
import { ContainerDirectory } from "../../../src/discovery/directory";
import { dockerServiceName, fromInspect } from "../../../src/discovery/docker/containers";
import { podContainerEntries, trimPod, type Pod } from "../../../src/discovery/kubernetes/pods";

const A = "a".repeat(64);
const B = "b".repeat(64);

describe("serviceAt", () => {
  test("docker: addresses from the inspected networks, named by compose service or container name; forgotten with the container", () => {
    const c = fromInspect({
      Id: A,
      Name: "/shop-db-1",
      Image: "sha256:1",
      State: { Running: true, Pid: 10 },
      Config: { Image: "postgres:16", Labels: { "com.docker.compose.service": "db" } },
      NetworkSettings: { Networks: { bridge: { IPAddress: "172.17.0.5", GlobalIPv6Address: "" }, shop: { IPAddress: "172.20.0.2", GlobalIPv6Address: "fd00::2" } } },
    });
    expect(c.addresses).toEqual(["172.17.0.5", "172.20.0.2", "fd00::2"]);
    const d = new ContainerDirectory();
    d.set("docker", { id: c.id, attributes: {}, addresses: c.addresses, service: dockerServiceName(c) });
    expect(d.serviceAt("172.20.0.2", 5432)).toBe("db");
    expect(d.serviceAt("::ffff:172.17.0.5", 5432)).toBe("db");
    expect(d.serviceAt("fd00::2", 5432)).toBe("db");
    expect(d.serviceAt("172.20.0.3", 5432)).toBeUndefined();
    d.remove("docker", A);
    expect(d.serviceAt("172.20.0.2", 5432)).toBeUndefined();
    const plain = fromInspect({ Id: B, Name: "/cache", Image: "x", State: { Running: true, Pid: 11 }, Config: { Image: "redis", Labels: null } });
    expect(plain.addresses).toBeUndefined();
    expect(dockerServiceName(plain)).toBe("cache");
  });

  test("kubernetes: the pod IP answers for the pod's workload (deployment), also after trimming; replace() drops old addresses", () => {
    const pod: Pod = {
      metadata: { name: "web-5d8f7c9b7-x2x", namespace: "ns", uid: "u", labels: { "pod-template-hash": "5d8f7c9b7" }, ownerReferences: [{ kind: "ReplicaSet", name: "web-5d8f7c9b7", controller: true }] },
      status: { phase: "Running", podIP: "10.1.2.3", podIPs: [{ ip: "10.1.2.3" }, { ip: "fd00::1:2:3" }], containerStatuses: [{ name: "app", containerID: `containerd://${B}` }] },
    } as Pod;
    const d = new ContainerDirectory();
    d.replace("kubernetes", podContainerEntries(trimPod(pod), ""));
    expect(d.serviceAt("10.1.2.3", 80)).toBe("web");
    expect(d.serviceAt("fd00::1:2:3", 80)).toBe("web");
    d.replace("kubernetes", []);
    expect(d.serviceAt("10.1.2.3", 80)).toBeUndefined();
  });
});
