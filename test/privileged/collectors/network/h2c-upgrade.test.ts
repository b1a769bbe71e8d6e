/**
 * Privileged: HTTP/2 reached through the HTTP/1.1 Upgrade (h2c, RFC 9113 section 3.2) on the real kernel. A server on
 * Debian's python3-h2 accepts the upgrade; curl --http2 asks for it on its first request and sends a second on the
 * upgraded connection. The connection starts as HTTP/1.1, gets 101 (with the server's SETTINGS in the same write),
 * then both sides speak HTTP/2: stream 1 carries the upgraded request's response, stream 3 the second request.
 * Each request is one span on each side (version 2: it was answered in HTTP/2) and counts once in the HTTP RED
 * metrics with its final status: the 101 that switched to h2c is neither a span nor a count of its own. A 101 to
 * another protocol (Upgrade: websocket, then the connection closes) stays an HTTP/1.1 exchange with status 101.
 * Both ways of capturing HTTP bytes (socket tracepoints, RED counted in the kernel; syscall tracepoints, RED counted
 * in user space).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { resolve } from "node:path";
import { firstLine } from "../../../helpers/wait";
import { decodeSpansWithProtoc, startTracingAgent, until, type DecodedSpan, type TracingAgent } from "./harness";

setDefaultTimeout(60_000);

const SERVER = resolve(import.meta.dir, "../../../fixtures/h2c-upgrade-server.py");
const PYTHON = "/usr/bin/python3";
const isRoot = process.getuid?.() === 0;
const missing = [...(Bun.spawnSync([PYTHON, "-c", "import h2"]).exitCode === 0 ? [] : ["python3-h2"]), ...["curl", "protoc"].filter((b) => !Bun.which(b))];

for (const mode of ["socket", "syscalls"] as const) {
  describe.skipIf(!isRoot || missing.length > 0)(`h2c via Upgrade (http_capture: ${mode})${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
    let t: TracingAgent;
    let server: Bun.Subprocess<"ignore", "pipe", "inherit">;
    let port = 0;
    let curlPid = 0;
    let wsCurlPid = 0;
    let spans: DecodedSpan[] = [];

    beforeAll(async () => {
      /* Every process on the host is traced: budgets above what other work on the machine can spend. */
      t = await startTracingAgent(`    network:
      enabled: true
      http_capture: ${mode}
      max_spans_per_second: 1000000
      http2_records_per_second: 10000000
      metrics_interval: 1s`);
      await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
      server = Bun.spawn([PYTHON, SERVER], { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
      port = Number(await firstLine(server.stdout));
      const base = `http://127.0.0.1:${port}`;
      const curl = Bun.spawn(["curl", "-s", "--http2", "-o", "/dev/null", "-o", "/dev/null", "-w", "%{http_code} %{http_version}\\n", `${base}/up?x=1`, `${base}/missing`], { stdout: "pipe", stderr: "inherit" });
      curlPid = curl.pid;
      expect(await new Response(curl.stdout).text()).toBe("200 2\n404 2\n");
      expect(await curl.exited).toBe(0);
      const ws = Bun.spawn(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Connection: Upgrade", "-H", "Upgrade: websocket", `${base}/ws`], { stdout: "pipe", stderr: "inherit" });
      wsCurlPid = ws.pid;
      expect(await new Response(ws.stdout).text()).toBe("101");
      await ws.exited;
    }, 60_000);

    afterAll(async () => {
      server?.kill();
      await server?.exited;
      await t?.stop();
    });

    const of = (pid: number, kind: string) => spans.filter((s) => s.attributes["process.pid"] === pid && s.kind === kind && s.attributes["http.request.method"] !== undefined);
    const rows = (list: DecodedSpan[]) => list.map((s) => `${s.attributes["http.request.method"]} ${s.attributes["url.path"]} ${s.attributes["http.response.status_code"]} ${s.attributes["network.protocol.version"]}`).sort();

    test("each request is one span on each side: stream 1 answers the upgraded request, the h2c 101 is no span", async () => {
      await until(() => ((spans = t.collected.spans), of(server.pid, "SPAN_KIND_SERVER").length >= 3 && of(curlPid, "SPAN_KIND_CLIENT").length >= 2 && of(wsCurlPid, "SPAN_KIND_CLIENT").length >= 1), "3 server and 3 client spans", 20_000).catch((e: Error) => {
        throw new Error(`${e.message}; seen: server ${rows(of(server.pid, "SPAN_KIND_SERVER"))}, curl ${rows(of(curlPid, "SPAN_KIND_CLIENT"))}, ws ${rows(of(wsCurlPid, "SPAN_KIND_CLIENT"))}`);
      });
      await Bun.sleep(500);
      spans = decodeSpansWithProtoc(t.collected.traceBodies);
      expect(rows(of(server.pid, "SPAN_KIND_SERVER"))).toEqual(["GET /missing 404 2", "GET /up 200 2", "GET /ws 101 1.1"]);
      expect(rows(of(curlPid, "SPAN_KIND_CLIENT"))).toEqual(["GET /missing 404 2", "GET /up 200 2"]);
      expect(rows(of(wsCurlPid, "SPAN_KIND_CLIENT"))).toEqual(["GET /ws 101 1.1"]);
      for (const s of [...of(server.pid, "SPAN_KIND_SERVER"), ...of(curlPid, "SPAN_KIND_CLIENT")]) {
        expect(s.attributes["url.scheme"]).toBe("http");
        expect(s.attributes["server.port"]).toBe(port);
        expect(s.endNs).toBeGreaterThan(s.startNs);
      }
      const up = of(server.pid, "SPAN_KIND_SERVER").find((s) => s.attributes["url.path"] === "/up")!;
      expect(up.attributes["url.query"]).toBe("x=REDACTED");
      /* Both h2 requests shared curl's one connection. */
      expect(new Set(of(server.pid, "SPAN_KIND_SERVER").filter((s) => s.attributes["network.protocol.version"] === "2").map((s) => s.attributes["client.port"])).size).toBe(1);
    });

    test("the HTTP RED metrics count each request once with its final status: no count for the h2c 101", async () => {
      const counts = (metric: string) => {
        const out: Record<string, number> = {};
        for (const p of t.collected.points) {
          if (p.metric !== metric || p.attributes["server.port"] !== port) continue;
          const k = `${p.attributes["http.request.method"]} ${p.attributes["http.response.status_code"] ?? "-"}`;
          out[k] = (out[k] ?? 0) + p.count;
        }
        return out;
      };
      const total = (metric: string) => Object.values(counts(metric)).reduce((a, b) => a + b, 0);
      await until(() => total("http.server.request.duration") >= 3 && total("http.client.request.duration") >= 3, "RED points", 20_000);
      await Bun.sleep(2500);
      const expected = { "GET 200": 1, "GET 404": 1, "GET 101": 1 };
      expect(counts("http.server.request.duration")).toEqual(expected);
      expect(counts("http.client.request.duration")).toEqual(expected);
    });
  });
}
