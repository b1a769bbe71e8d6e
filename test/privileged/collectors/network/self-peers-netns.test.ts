/**
 * Privileged: the agent's own endpoints (svc_self_peers, common.h) are matched per network namespace where the
 * address is a loopback one. A loopback address exists once per namespace: a connection in another namespace from
 * 127.0.0.1 at the agent's own local port (a pod's sidecar proxy talking to its application over loopback) is not the
 * other end of the agent's connection, and its server's exchanges are traced and counted. Any other address is one
 * host-wide: a server in another namespace whose client is the agent's connection from the host's side of a veth
 * pair (the agent exporting to a collector in a container) still gives no span. The namespace and its veth pair are
 * this test's own, on this host only, removed at the end. Both program families: tp_btf on per-socket storage
 * (http_capture socket) and the classic tracepoints on the `conns` hash (http_capture syscalls, as without BTF).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync, rmSync } from "node:fs";
import { resolve } from "node:path";
import { startPortServer, type PortServer } from "../../../helpers/ports";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";
import { startLoopbackHttpServer, startTracingAgent, until, type TracingAgent } from "./harness";

setDefaultTimeout(90_000);

const isRoot = process.getuid?.() === 0;
const HTTPS_SERVER = resolve(import.meta.dir, "../../../fixtures/https-server.py");
/** The network set with HTTP capture `capture` (socket: tp_btf programs on per-socket storage; syscalls: the classic
 * tracepoints on the `conns` hash, as on kernels without BTF). */
const network = (capture: string) => `    network:
      enabled: true
      http: true
      http_capture: ${capture}
      metrics_interval: 1s
      max_spans_per_second: 1000000`;

function sh(argv: string[]): void {
  const r = Bun.spawnSync(argv, { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`${argv.join(" ")}: ${r.stderr.toString()}`);
}

/** Local ports of this namespace's established loopback IPv4 connections to 127.0.0.1:`port` (/proc/net/tcp). */
function loopbackClientPorts(port: number): number[] {
  const out: number[] = [];
  for (const line of readFileSync("/proc/net/tcp", "utf8").split("\n").slice(1)) {
    const [, local, remote, st] = line.trim().split(/\s+/);
    if (!local || !remote || st !== "01") continue;
    const [laddr, lport] = local.split(":");
    const [raddr, rport] = remote.split(":");
    if (laddr === "0100007F" && raddr === "0100007F" && parseInt(rport!, 16) === port) out.push(parseInt(lport!, 16));
  }
  return out;
}

for (const [i, capture] of (["socket", "syscalls"] as const).entries())
  describe.skipIf(!isRoot || !Bun.which("curl") || !Bun.which("ip") || !Bun.which("openssl"))(
    `the agent's own endpoints in other network namespaces (http_capture: ${capture})${isRoot ? "" : " (needs root)"}`,
    () => {
      const NS = `svc-sp-${process.pid}-${i}`;
      /** A namespace of the TLS test's own: the port of the cleartext test's client may still be in TIME_WAIT in NS. */
      const NS_TLS = `svc-spt-${process.pid}-${i}`;
      /** The veth pair's ends (host side, namespace side) and their /30. */
      const VETH_HOST = `vsph${process.pid % 100000}${i}`;
      const VETH_NS = `vspn${process.pid % 100000}${i}`;
      const NET = `10.213.${(process.pid % 120) * 2 + i}`;
      const HOST_ADDR = `${NET}.1`;
      const NS_ADDR = `${NET}.2`;
      /** A Bun.serve HTTP server answering "ok" inside the namespace, listening on `host`. */
      const serverIn = (host: string) =>
        startPortServer(["ip", "netns", "exec", NS, process.execPath, "-e", `const s = Bun.serve({ hostname: "${host}", port: 0, fetch: () => new Response("ok") }); console.log(s.port);`]);

      let t: TracingAgent;
      let loopbackServer: PortServer;
      let vethServer: PortServer;
      let hostServer: Awaited<ReturnType<typeof startLoopbackHttpServer>>;
      let httpsServer: PortServer;
      let cert: SelfSignedCert;

      const served = (port: number) => t.collected.spans.filter((s) => s.kind === "SPAN_KIND_SERVER" && s.attributes["server.port"] === port);
      const red = (port: number) => t.collected.total("http.server.request.duration", (a) => a["server.port"] === port);

      /**
       * A request to a server on the host, once its span and RED count arrived: what the agent saw before it (spans
       * and counts of exchanges already answered) has been exported by then.
       */
      let settles = 0;
      async function settle(): Promise<void> {
        const hostPort = Number(new URL(hostServer.base).port);
        const counted = red(hostPort);
        const path = `/settle-${++settles}`;
        const curl = Bun.spawn(["curl", "-s", "-o", "/dev/null", `${hostServer.base}${path}`], { stdout: "ignore", stderr: "inherit" });
        expect(await curl.exited).toBe(0);
        await until(() => served(hostPort).some((s) => s.attributes["url.path"] === path) && red(hostPort) > counted, `the host server's span and RED count of ${path}`, 20_000);
      }

      /**
       * The local port of the agent's export connection to the receiver, one that moved data while the set was
       * attached (its endpoint is recorded); should the channel have connected anew, after the next settle.
       */
      async function agentPort(): Promise<number> {
        for (let i = 0; i < 3; i++) {
          const [port] = loopbackClientPorts(t.port);
          if (port !== undefined) return port;
          console.warn(`no established connection to the receiver at 127.0.0.1:${t.port}: a settle and a look again`);
          await settle();
        }
        throw new Error(`no established connection to the receiver at 127.0.0.1:${t.port} after three exports`);
      }

      beforeAll(async () => {
        sh(["ip", "netns", "add", NS]);
        sh(["ip", "-n", NS, "link", "set", "lo", "up"]);
        sh(["ip", "netns", "add", NS_TLS]);
        sh(["ip", "-n", NS_TLS, "link", "set", "lo", "up"]);
        sh(["ip", "link", "add", VETH_HOST, "type", "veth", "peer", "name", VETH_NS, "netns", NS]);
        sh(["ip", "addr", "add", `${HOST_ADDR}/30`, "dev", VETH_HOST]);
        sh(["ip", "link", "set", VETH_HOST, "up"]);
        sh(["ip", "-n", NS, "addr", "add", `${NS_ADDR}/30`, "dev", VETH_NS]);
        sh(["ip", "-n", NS, "link", "set", VETH_NS, "up"]);
        t = await startTracingAgent(network(capture));
        await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
        loopbackServer = await serverIn("127.0.0.1");
        vethServer = await serverIn(NS_ADDR);
        cert = makeSelfSignedCert();
        // Python's http.server in ssl (OpenSSL) on 127.0.0.1 in the namespace.
        httpsServer = await startPortServer(["ip", "netns", "exec", NS_TLS, "/usr/bin/python3", HTTPS_SERVER, cert.certPath, `${cert.dir}/key.pem`]);
        // A span to export: the agent's export connection opens (its programs attached) and moves data. Ports are per
        // namespace: the host's server takes one no server of the namespaces has, so that no test counts its spans.
        const taken = new Set([loopbackServer.port, vethServer.port, httpsServer.port]);
        for (let i = 0; i < 5; i++) {
          hostServer = await startLoopbackHttpServer();
          if (i === 4 || !taken.has(Number(new URL(hostServer.base).port))) break;
          await hostServer.stop();
        }
        await settle();
      });

      afterAll(async () => {
        await loopbackServer?.stop();
        await vethServer?.stop();
        await hostServer?.stop();
        await httpsServer?.stop();
        if (cert) rmSync(cert.dir, { recursive: true, force: true });
        await t?.stop();
        Bun.spawnSync(["ip", "link", "del", VETH_HOST]);
        Bun.spawnSync(["ip", "netns", "del", NS]);
        Bun.spawnSync(["ip", "netns", "del", NS_TLS]);
      });

      test("a loopback connection in another namespace from the agent's own local port is traced and counted", async () => {
        // The agent's export connection (it moved data while the set was attached: its local endpoint is recorded).
        const port = await agentPort();

        // One connection from 127.0.0.1 at that port inside the namespace, three requests on it.
        const base = `http://127.0.0.1:${loopbackServer.port}`;
        const out = ["-o", "/dev/null"];
        const curl = Bun.spawn(["ip", "netns", "exec", NS, "curl", "-s", "--local-port", String(port), ...out, ...out, ...out, `${base}/a`, `${base}/b`, `${base}/c`], {
          stdout: "ignore",
          stderr: "inherit",
        });
        expect(await curl.exited).toBe(0);
        await until(() => served(loopbackServer.port).length >= 3 && red(loopbackServer.port) >= 3, "the server's spans and RED counts of curl's requests", 20_000);
        await settle();
        expect(served(loopbackServer.port).map((s) => `${s.attributes["http.request.method"]} ${s.attributes["url.path"]} ${s.attributes["client.port"]}`)).toEqual([
          `GET /a ${port}`,
          `GET /b ${port}`,
          `GET /c ${port}`,
        ]);
        expect(red(loopbackServer.port)).toBe(3);
      });

      test("the same over TLS: the HTTPS server's exchange with 127.0.0.1 at the agent's own local port is traced and counted", async () => {
        const url = `https://127.0.0.1:${httpsServer.port}`;
        const curlIn = async (args: string[]) => {
          const curl = Bun.spawn(["ip", "netns", "exec", NS_TLS, "curl", "-sk", "--http1.1", "-o", "/dev/null", ...args], { stdout: "ignore", stderr: "inherit" });
          expect(await curl.exited).toBe(0);
        };
        // Its spans and counts are https ones: a server of another namespace (the host's, in settle) may have the same
        // port number.
        const spansOf = () =>
          served(httpsServer.port)
            .filter((s) => s.attributes["url.scheme"] === "https")
            .map((s) => `${s.attributes["url.scheme"]} ${s.attributes["url.path"]} ${s.attributes["client.port"]}`);
        const counts = () => t.collected.total("http.server.request.duration", (a) => a["server.port"] === httpsServer.port && a["url.scheme"] === "https");
        // ebpf/tls attaches to the server's libssl in the background: a request from a port of the kernel's choice
        // a try, until its span arrives; then the spans and count so far (a try's span may come after the next
        // try was made).
        for (let i = 0; i < 6 && spansOf().length === 0; i++) {
          await curlIn([`${url}/warm-${i}`]);
          await until(() => spansOf().length > 0, "the HTTPS server's span", 5_000).catch(() => {});
        }
        await settle();
        const warm = spansOf().length;
        expect(warm).toBeGreaterThan(0);
        expect(spansOf().every((s) => s.startsWith("https /warm-"))).toBe(true);
        const counted = counts();
        const port = await agentPort();

        await curlIn(["--local-port", String(port), `${url}/own-port`]);
        await until(() => spansOf().length > warm && counts() > counted, "the HTTPS server's span and RED count of the request from the agent's port", 20_000);
        await settle();
        expect(spansOf().slice(warm)).toEqual([`https /own-port ${port}`]);
        expect(counts()).toBe(counted + 1);
      });

      test("the server end of the agent's connection over a veth pair gives no span; another client's request does", async () => {
        const url = `http://${NS_ADDR}:${vethServer.port}`;
        // A connection of the agent's process (the in-process agent's) to the server in the namespace.
        const own = await fetch(`${url}/own`);
        expect(await own.text()).toBe("ok");
        const curl = Bun.spawn(["curl", "-s", "-o", "/dev/null", `${url}/other`], { stdout: "ignore", stderr: "inherit" });
        expect(await curl.exited).toBe(0);
        await until(() => served(vethServer.port).length >= 1 && red(vethServer.port) >= 1, "the server's span and RED count of curl's request", 20_000);
        // The agent's request was served before curl's: its span or count would have come by now.
        await settle();
        expect(served(vethServer.port).map((s) => `${s.attributes["http.request.method"]} ${s.attributes["url.path"]}`)).toEqual(["GET /other"]);
        expect(red(vethServer.port)).toBe(1);
      });
    },
  );
