/**
 * Privileged: an HTTP/2 connection opened before the agent (a long-lived h2c or gRPC connection across an agent
 * restart) is counted from the agent's start on. A Node `http2` client opens one connection to a Node `http2`
 * server and makes 5 requests over it; only then does the agent load its programs, and the same connection carries
 * 20 requests to distinct /late/<n> paths, 10 to /missing (404) and 5 more to /early. The kernel finds HTTP/2
 * frames in the connection's middle and forwards it; user space decodes each direction from its first call that
 * starts with frames, its HPACK tables partial. The RED metrics at the receiver count exactly the 35 requests
 * made after the start, on both sides, per status (and per route where the path was sent after the start), and the
 * server spans carry the paths. Without the kernel's part nothing of the connection is counted. A reload of the
 * network set (new programs, new per-socket storage: every connection is one seen after it opened) then gives the
 * same connection's next 35 requests the same counts. svc_ebpf_http2_midstream_total counts the connection's two
 * sockets each time. Both capture modes (socket storage and syscall tracepoints).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { LONG_LIVED_H2_CLIENT, decodeSpansWithProtoc, startAgentThenGo, until, type DecodedSpan, type TracingAgent } from "./harness";
import { firstLine } from "../../../helpers/wait";

setDefaultTimeout(60_000);

const REPO = new URL("../../../../", import.meta.url).pathname;

const SERVER = `
const http2 = require("node:http2");
const s = http2.createServer();
s.on("stream", (stream, headers) => {
  const p = headers[":path"];
  stream.respond({ ":status": p === "/missing" ? 404 : 200, "content-type": "text/plain" });
  stream.end("hello " + p);
});
s.listen(0, "127.0.0.1", () => console.log(s.address().port));
`;

describe.each(["socket", "syscalls"] as const)("an HTTP/2 connection opened before the agent (http_capture: %s)", (mode) => {
  let t: TracingAgent | undefined;
  let serverProc: Bun.Subprocess<"ignore", "pipe", "inherit">;
  let clientProc: Bun.Subprocess<"pipe", "pipe", "inherit">;
  let port = 0;
  let counts: Record<string, number> = {};

  beforeAll(async () => {
    serverProc = Bun.spawn(["node", "-e", SERVER], { cwd: REPO, stdin: "ignore", stdout: "pipe", stderr: "inherit" });
    port = Number(await firstLine(serverProc.stdout));
    clientProc = Bun.spawn(["node", "-e", LONG_LIVED_H2_CLIENT, `http://127.0.0.1:${port}`], { cwd: REPO, stdin: "pipe", stdout: "pipe", stderr: "inherit" });
    expect(await firstLine(clientProc.stdout)).toBe("open");
    /* The connection and its first five streams are behind it: now the agent starts. */
    const started = await startAgentThenGo(mode, clientProc);
    t = started.t;
    counts = JSON.parse(started.line);
  }, 90_000);

  async function programId(name: string): Promise<number> {
    const body = (await (await t!.agent.request("/status/ebpf")).json()) as { programs: Array<{ name: string; id: number }> };
    return body.programs.find((p) => p.name === name)?.id ?? 0;
  }

  const c = () => t!.collected;
  const server = (status: number, route?: string) =>
    c().total("http.server.request.duration", (a) => a["server.port"] === port && a["http.response.status_code"] === status && (route === undefined || a["http.route"] === route));
  const client = (status: number) => c().total("http.client.request.duration", (a) => a["server.port"] === port && a["http.response.status_code"] === status);
  async function counted(n: number): Promise<void> {
    await until(() => server(200) + server(404) >= n && client(200) + client(404) >= n, `${n} server and ${n} client requests counted`, 20_000).catch((e: Error) => {
      throw new Error(`${e.message}: server 200 ${server(200)}, 404 ${server(404)}; client 200 ${client(200)}, 404 ${client(404)}`);
    });
    /* Two more intervals: nothing counted twice, nothing from before the start. */
    await Bun.sleep(2_500);
  }

  async function midstreamConnections(): Promise<number> {
    const text = await (await t!.agent.request("/metrics")).text();
    return Number(text.split("\n").find((l) => l.startsWith("svc_ebpf_http2_midstream_total "))?.split(" ")[1] ?? NaN);
  }

  afterAll(async () => {
    clientProc?.stdin.end();
    clientProc?.kill();
    serverProc?.kill();
    await Promise.all([clientProc?.exited, serverProc?.exited]);
    await t?.stop();
  });

  test("the client made its 35 requests over the connection it opened before the agent", () => {
    expect(counts).toEqual({ "200": 25, "404": 10 });
  });

  test("RED metrics count the 35 requests made after the start exactly, on both sides, per status and route", async () => {
    await counted(35);
    expect([server(200), server(404), client(200), client(404)]).toEqual([25, 10, 25, 10]);
    /* Every /late/<n> under one route. Node's HTTP/2 sends each :path as a literal without indexing, so /early, sent
     * before the start too, is known as well. */
    expect(server(200, "/late/{id}")).toBe(20);
    expect(server(404, "/missing")).toBe(10);
    expect(server(200, "/early")).toBe(5);
    for (const p of c().points.filter((p) => p.metric === "http.server.request.duration" && p.attributes["server.port"] === port)) expect(p.attributes["http.request.method"]).toBe("GET");
    /* Both ends of the connection (two sockets of this host) were found in their middle, and /metrics says so. */
    expect(await midstreamConnections()).toBeGreaterThanOrEqual(2);
  });

  test("server spans carry the paths sent after the start, as HTTP/2", async () => {
    const late = (spans: DecodedSpan[]) => spans.filter((s) => s.kind === "SPAN_KIND_SERVER" && s.attributes["server.port"] === port && String(s.attributes["url.path"]).startsWith("/late/"));
    /* Waiting reads the receiver's own decoding; the assertions read protoc's, from the official protos. */
    await until(() => late(t!.collected.spans).length >= 20, "20 server spans of /late/<n>");
    const spans = late(decodeSpansWithProtoc(t!.collected.traceBodies));
    expect(spans.map((s) => s.attributes["url.path"]).sort()).toEqual(Array.from({ length: 20 }, (_, i) => `/late/${1000 + i}`));
    for (const s of spans) expect([s.attributes["network.protocol.version"], s.attributes["http.response.status_code"]]).toEqual(["2", 200]);
  });

  test("after a reload of the network set, the same connection's next 35 requests count the same", async () => {
    const before = await programId(mode === "socket" ? "on_send_length" : "exit_read");
    await t!.reconfigure(`    network:
      enabled: true
      http_capture: ${mode}
      max_spans_per_second: 999999
      max_connections: 4096
      metrics_interval: 1s`);
    await until(() => t!.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok after reload", 30_000);
    const after = await programId(mode === "socket" ? "on_send_length" : "exit_read");
    expect(after).toBeGreaterThan(0);
    expect(after).not.toBe(before);
    clientProc.stdin.write("go\n");
    clientProc.stdin.flush();
    expect(JSON.parse(await firstLine(clientProc.stdout))).toEqual({ "200": 25, "404": 10 });
    await counted(70);
    expect([server(200), server(404), client(200), client(404)]).toEqual([50, 20, 50, 20]);
    expect(server(200, "/late/{id}")).toBe(40);
    /* The reloaded set found both ends in their middle again. */
    expect(await midstreamConnections()).toBeGreaterThanOrEqual(4);
  });
});
