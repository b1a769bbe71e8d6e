/**
 * Privileged: the agent's own endpoints (svc_self_peers, common.h) outlive no network set. The map is one kernel map
 * for the life of the process (shared with the tls set and kept across reloads), and only an attached network set
 * removes an endpoint when its connection closes: a connection of the agent recorded by one set and closed while no
 * set is attached (network disabled by a reload, or between two agents of one process) left its endpoint behind,
 * and a later connection from that port was taken for the other end of the agent's own connection: neither traced
 * nor counted. Here the agent's connection closes while network tracing is off; once it is on again, curl's request
 * from the same local port is one SERVER span and one RED count of the server.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync } from "node:fs";
import { startPortServer, type PortServer } from "../../../helpers/ports";
import { startLoopbackHttpServer, startTracingAgent, until, type TracingAgent } from "./harness";

setDefaultTimeout(90_000);

const isRoot = process.getuid?.() === 0;
const NETWORK = `    network:
      enabled: true
      http: true
      http_capture: socket
      metrics_interval: 1s
      max_spans_per_second: 1000000`;

/** A TCP server in a child process that ends a connection when it receives "bye". */
const BYE_SERVER = `const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data(s, d) { if (String(d).includes("bye")) s.end(); } } }); console.log(l.port);`;

/** Whether a TCP socket of this host's network namespace has local port `port` (any state). */
function portInUse(port: number): boolean {
  return ["/proc/net/tcp", "/proc/net/tcp6"].some((f) => readFileSync(f, "utf8").split("\n").slice(1).some((l) => parseInt(l.trim().split(/\s+/)[1]?.split(":")[1] ?? "", 16) === port));
}

describe.skipIf(!isRoot || !Bun.which("curl"))(`the agent's own endpoints after network tracing was off${isRoot ? "" : " (needs root)"}`, () => {
  let t: TracingAgent;
  let bye: PortServer;
  let server: Awaited<ReturnType<typeof startLoopbackHttpServer>>;
  const state = () => t.agent.agent.status.component("ebpf/network")?.state;

  beforeAll(async () => {
    t = await startTracingAgent(NETWORK);
    await until(() => state() === "ok", "ebpf/network ok", 30_000);
    bye = await startPortServer([process.execPath, "-e", BYE_SERVER]);
    server = await startLoopbackHttpServer();
  });

  afterAll(async () => {
    await server?.stop();
    await bye?.stop();
    await t?.stop();
  });

  test("a port of the agent's connection closed while tracing was off is traced and counted once it is back on", async () => {
    // A connection of the agent's process (the in-process agent's), established while the set is attached: its
    // local endpoint is recorded as one of the agent's own.
    const closed = Promise.withResolvers<void>();
    const sock = await Bun.connect({ hostname: "127.0.0.1", port: bye.port, socket: { data() {}, close: () => closed.resolve() } });
    const port = sock.localPort;
    await t.reconfigure(`    network:
      enabled: false`);
    await until(() => state() === "disabled", "ebpf/network disabled", 30_000);
    // The server ends it (no TIME_WAIT on this side): the port is free again, with no set to see the close.
    sock.write("bye");
    await closed.promise;
    await until(() => !portInUse(port), `local port ${port} released`, 10_000);
    await t.reconfigure(NETWORK);
    await until(() => state() === "ok", "ebpf/network ok again", 30_000);

    const curl = Bun.spawn(["curl", "-s", "--local-port", String(port), "-o", "/dev/null", `${server.base}/after-off`], { stdout: "ignore", stderr: "inherit" });
    expect(await curl.exited).toBe(0);
    const served = () => t.collected.spans.filter((s) => s.kind === "SPAN_KIND_SERVER" && s.attributes["server.port"] === Number(new URL(server.base).port));
    const red = () => t.collected.total("http.server.request.duration", (a) => a["server.port"] === Number(new URL(server.base).port));
    await until(() => served().length >= 1 && red() >= 1, "the server's span and RED count of curl's request", 20_000);
    expect(served().map((s) => `${s.attributes["http.request.method"]} ${s.attributes["url.path"]} ${s.attributes["client.port"]}`)).toEqual([`GET /after-off ${port}`]);
    expect(red()).toBe(1);
  });
});
