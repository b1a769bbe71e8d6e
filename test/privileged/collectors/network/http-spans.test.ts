/**
 * Privileged: the real `network` program set on this kernel. A Bun.serve HTTP server and curl run as child
 * processes (the agent never traces its own pid); curl sends several requests on one keep-alive connection
 * and one connect is refused. The exact spans and connection metrics must reach an OTLP receiver, with
 * either way of capturing HTTP bytes (socket tracepoints + saved registers, or syscall tracepoints).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { realpathSync } from "node:fs";
import { basename } from "node:path";
import { startTracingAgent, until, type TracingAgent, type DecodedSpan } from "./harness";
import { firstLine } from "../../../helpers/wait";
import { closedLoopbackPort } from "../../../helpers/ports";

const SERVER_SCRIPT = `
const s = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch(req) {
    const u = new URL(req.url);
    if (u.pathname === "/missing") return new Response("no", { status: 404 });
    if (req.method === "POST") return new Response("made", { status: 201 });
    return new Response("hello " + u.pathname);
  },
});
console.log(s.port);
`;

setDefaultTimeout(30_000);

/** The server runs under this test's Bun: its executable name as the process table reports it. */
const BUN_EXE = basename(realpathSync(process.execPath));

function suite(mode: "socket" | "syscalls"): void {
  let t: TracingAgent;
  let server: Bun.Subprocess<"ignore", "pipe", "inherit">;
  let port = 0;
  let refusedPort = 0;
  let curlPid = 0;
  let refusedCurlPid = 0;
  let started = 0n;

  describe(`network tracing on the real kernel (http_capture: ${mode})`, () => {
    beforeAll(async () => {
      t = await startTracingAgent(`    network:
      enabled: true
      http_capture: ${mode}
      metrics_interval: 1s`);
      await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
      started = BigInt(Date.now()) * 1_000_000n;
      server = Bun.spawn([process.execPath, "-e", SERVER_SCRIPT], { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
      port = Number(await firstLine(server.stdout));
      const base = `http://127.0.0.1:${port}`;
      // One curl, one connection: three GETs then (--next keeps the connection) a POST.
      const curl = Bun.spawn(
        ["curl", "-s", "--http1.1", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", `${base}/hello?x=1`, `${base}/missing`, `${base}/a/b/c?q=2#f`,
          "--next", "-s", "--http1.1", "-o", "/dev/null", "-d", "k=v", `${base}/submit`],
        { stdout: "ignore", stderr: "pipe" },
      );
      curlPid = curl.pid;
      expect(await curl.exited).toBe(0);
      refusedPort = closedLoopbackPort();
      const refused = Bun.spawn(["curl", "-s", "-o", "/dev/null", `http://127.0.0.1:${refusedPort}/nothing`], { stdout: "ignore", stderr: "ignore" });
      refusedCurlPid = refused.pid;
      expect(await refused.exited).toBe(7);
    }, 60_000);

    afterAll(async () => {
      server?.kill();
      await server?.exited;
      await t?.stop();
    });

    const byPid = (pid: number) => (s: DecodedSpan) => s.attributes["process.pid"] === pid;

    test("server spans: one per request on the keep-alive connection, exact method/path/status/ports", async () => {
      const wanted = 4;
      await until(() => t.collected.spans.filter(byPid(server.pid)).length >= wanted, `${wanted} server spans`);
      const spans = t.collected.spans.filter(byPid(server.pid));
      expect(spans).toHaveLength(wanted);
      const rows = spans.map((s) => [s.attributes["http.request.method"], s.attributes["url.path"], s.attributes["http.response.status_code"]]).sort();
      expect(rows).toEqual([
        ["GET", "/a/b/c", 200],
        ["GET", "/hello", 200],
        ["GET", "/missing", 404],
        ["POST", "/submit", 201],
      ].sort());
      const clientPorts = new Set(spans.map((s) => s.attributes["client.port"]));
      expect(clientPorts.size).toBe(1); // one keep-alive connection carried all four
      for (const s of spans) {
        expect(s.kind).toBe("SPAN_KIND_SERVER");
        expect(s.attributes["server.port"]).toBe(port);
        expect(s.attributes["server.address"]).toBe("127.0.0.1");
        expect(s.attributes["client.address"]).toBe("127.0.0.1");
        expect(s.attributes["process.executable.name"]).toBe(BUN_EXE);
        expect(s.startNs).toBeGreaterThan(started);
        const ms = Number(s.endNs - s.startNs) / 1e6;
        expect(ms).toBeGreaterThan(0);
        expect(ms).toBeLessThan(5000);
      }
    });

    test("pipelined requests in one write become separate server spans", async () => {
      const paths = ["/p1", "/p2?x", "/p3"];
      // A child process is the client: the server's side of a connection of the agent's own (this test process) is
      // not traced.
      const script = `let answered = "";
        const sock = await Bun.connect({ hostname: "127.0.0.1", port: ${port}, socket: { data(_s, d) { answered += new TextDecoder().decode(d); if ((answered.match(/HTTP\\/1\\.1 200/g) ?? []).length === 3) { sock.end(); console.log("3"); process.exit(0); } } } });
        sock.write(${JSON.stringify(paths.map((p) => `GET ${p} HTTP/1.1\r\nHost: pipelined\r\n\r\n`).join(""))});`;
      const client = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "inherit" });
      expect((await new Response(client.stdout).text()).trim()).toBe("3");
      await client.exited;
      await until(() => t.collected.spans.filter((s) => byPid(server.pid)(s) && s.attributes["server.address"] === "pipelined").length >= 3, "three pipelined server spans");
      const spans = t.collected.spans.filter((s) => byPid(server.pid)(s) && s.attributes["server.address"] === "pipelined");
      expect(spans.map((s) => s.attributes["url.path"]).sort()).toEqual(["/p1", "/p2", "/p3"]);
      // The agent (this test process) is never traced.
      expect(t.collected.spans.filter((s) => s.attributes["process.pid"] === process.pid)).toEqual([]);
    });

    test("client spans from curl pair with the same requests", async () => {
      await until(() => t.collected.spans.filter((s) => s.kind === "SPAN_KIND_CLIENT" && s.attributes["process.pid"] === curlPid && s.attributes["http.request.method"]).length >= 4, "4 curl client spans");
      const spans = t.collected.spans.filter((s) => s.attributes["process.pid"] === curlPid && s.attributes["http.request.method"]);
      expect(spans.map((s) => `${s.attributes["http.request.method"]} ${s.attributes["url.path"]} ${s.attributes["http.response.status_code"]}`).sort()).toEqual(["GET /a/b/c 200", "GET /hello 200", "GET /missing 404", "POST /submit 201"]);
      for (const s of spans) {
        expect(s.attributes["server.port"]).toBe(port);
        expect(s.attributes["process.executable.name"]).toBe("curl");
        expect(Number(s.endNs - s.startNs)).toBeGreaterThan(0);
      }
      expect(spans.find((s) => s.attributes["http.response.status_code"] === 404)!.status).toMatchObject({ code: "STATUS_CODE_ERROR" });
    });

    test("CONNECT spans: one for the keep-alive connection, one failed for the refused port", async () => {
      await until(() => t.collected.spans.some((s) => s.attributes["process.pid"] === refusedCurlPid && s.name.startsWith("CONNECT")), "refused CONNECT span");
      const ok = t.collected.spans.filter((s) => s.attributes["process.pid"] === curlPid && s.name.startsWith("CONNECT"));
      expect(ok.map((s) => s.name)).toEqual([`CONNECT 127.0.0.1:${port}`]);
      expect(ok[0]!.kind).toBe("SPAN_KIND_CLIENT");
      expect(Number(ok[0]!.endNs - ok[0]!.startNs)).toBeGreaterThan(0);
      const refused = t.collected.spans.filter((s) => s.attributes["process.pid"] === refusedCurlPid && s.name.startsWith("CONNECT"));
      expect(refused.map((s) => s.name)).toEqual([`CONNECT 127.0.0.1:${refusedPort}`]);
      expect(refused[0]!.status).toMatchObject({ code: "STATUS_CODE_ERROR" });
      // The local port of a connect that never got established too (bound after SYN_SENT, released before CLOSE).
      for (const s of [...ok, ...refused]) {
        expect(s.attributes["network.local.port"]).toBeGreaterThan(0);
        expect(s.attributes["network.local.port"]).not.toBe(s.attributes["server.port"]);
      }
    });

    test("connection metrics: opened/closed/failed/bytes with bounded labels", async () => {
      const curlOut = (a: Record<string, unknown>) => a["process.executable.name"] === "curl" && a["network.connection.direction"] === "outbound";
      await until(() => t.collected.total("network.tcp.connections.closed", (a) => curlOut(a) && a["server.port"] === port) >= 1, "closed connection metric");
      await until(() => t.collected.total("network.tcp.connections.failed", (a) => curlOut(a) && a["server.port"] === refusedPort) >= 1, "failed connection metric");
      expect(t.collected.total("network.tcp.connections.opened", (a) => curlOut(a) && a["server.port"] === port)).toBe(1);
      expect(t.collected.total("network.tcp.connect.duration", (a) => curlOut(a) && a["server.port"] === port)).toBe(1);
      expect(t.collected.total("network.tcp.bytes", (a) => curlOut(a) && a["server.port"] === port && a["network.io.direction"] === "transmit")).toBeGreaterThan(300);
      await until(() => t.collected.total("network.tcp.connections.opened", (a) => a["process.executable.name"] === BUN_EXE && a["network.connection.direction"] === "inbound" && a["server.port"] === port) >= 1, "inbound opened metric");
      for (const p of t.collected.points.filter((p) => p.metric.startsWith("network.tcp."))) {
        expect(Object.keys(p.attributes).sort()).not.toContain("client.port");
        expect(Object.keys(p.attributes).sort()).not.toContain("network.local.port");
      }
    });
  });
}

suite("socket");
suite("syscalls");
