/**
 * Privileged: service.peer.name on the connection metrics from a real Docker container. A test dockerd
 * (test/helpers/dockerd.ts) runs busybox httpd on a bridge network the test creates (its own subnet, removed
 * at the end); the agent's Docker discovery knows the container's address, so curl's connections to it are
 * labelled with the container's compose service, and connections to an address discovery does not know get
 * the fixed bucket (a refused connect to a closed loopback port here).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { TestDockerd, TEST_IMAGE, dockerdUnavailable } from "../../../helpers/dockerd";
import { closedLoopbackPort } from "../../../helpers/ports";
import { startTracingAgent, until, type TracingAgent } from "./harness";
import { METRIC_FAILED, METRIC_OPENED, UNKNOWN_REMOTE_SERVICE } from "../../../../src/collectors/network/connections";

setDefaultTimeout(120_000);

const unavailable = dockerdUnavailable();
/** A /24 unlikely to be in use on a test machine (the bridge's route must not shadow another). */
const SUBNET_OCTET = 100 + Math.floor(Math.random() * 150);
const SUBNET = `10.213.${SUBNET_OCTET}.0/24`;
const CONTAINER_IP = `10.213.${SUBNET_OCTET}.2`;
const HTTPD_PORT = 8080;

describe.skipIf(unavailable !== undefined)("remote service label from Docker discovery (real dockerd)", () => {
  let dockerd: TestDockerd;
  let t: TracingAgent;
  let port = 0;

  beforeAll(async () => {
    dockerd = new TestDockerd();
    await dockerd.start();
    dockerd.importImage();
    dockerd.docker("network", "create", "--driver", "bridge", "--subnet", SUBNET, "svcnet");
    dockerd.docker("run", "-d", "--network", "svcnet", "--stop-signal", "KILL", "--name", "shop-web-1", "--label", "com.docker.compose.service=web", TEST_IMAGE, "/bin/busybox", "httpd", "-f", "-p", String(HTTPD_PORT), "-h", "/");
    t = await startTracingAgent(`    network:
      enabled: true
      metrics_interval: 1s`, `      enabled: true
      socket: ${dockerd.socket}`);
    await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
    await until(() => t.agent.agent.status.component("discovery/docker")?.state === "ok", "discovery/docker ok", 30_000);
    port = closedLoopbackPort();
  });

  afterAll(async () => {
    await t?.stop();
    try {
      dockerd?.docker("rm", "-f", "shop-web-1");
      dockerd?.docker("network", "rm", "svcnet");
    } finally {
      await dockerd?.stop();
    }
  });

  test("curl to the container's address: service.peer.name=web; a refused connect to an unknown address: the fixed bucket, never an address", async () => {
    const curl = Bun.spawn(["curl", "-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}", `http://${CONTAINER_IP}:${HTTPD_PORT}/`], { stdout: "pipe" });
    expect(await new Response(curl.stdout).text()).toBe("404");
    const local = Bun.spawn(["curl", "-s", "-m", "2", "-o", "/dev/null", `http://127.0.0.1:${port}/`], { stdout: "ignore" });
    await local.exited;
    const opened = () =>
      t.collected.points.filter((p) => (p.metric === METRIC_OPENED || p.metric === METRIC_FAILED) && p.attributes["process.executable.name"] === "curl" && p.attributes["network.connection.direction"] === "outbound");
    await until(() => opened().some((p) => p.attributes["server.port"] === HTTPD_PORT) && opened().some((p) => p.attributes["server.port"] === port), "curl's outbound connection metrics", 30_000);
    expect(opened().find((p) => p.attributes["server.port"] === HTTPD_PORT)!.attributes["service.peer.name"]).toBe("web");
    expect(opened().find((p) => p.attributes["server.port"] === port)!.attributes["service.peer.name"]).toBe(UNKNOWN_REMOTE_SERVICE);
    for (const p of opened()) expect(JSON.stringify(p.attributes)).not.toContain(CONTAINER_IP);
  });
});
