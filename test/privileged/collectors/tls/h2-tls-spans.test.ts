/**
 * Privileged: HTTP/2 over TLS (h2, ALPN) on the real kernel through the TLS uprobes. nghttpd (Debian's
 * nghttp2-server, libssl.so.3) serves a directory; nghttp multiplexes three requests on one connection and curl
 * --http2 sends one, both through libssl. The plaintext read at SSL_read/SSL_write goes through the same HTTP/2
 * parser as h2c: the exported spans (decoded by protoc) must be exactly those requests, as SERVER spans of nghttpd and
 * CLIENT spans of each client, with url.scheme https and network.protocol.version 2.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { decodeSpansWithProtoc, startTracingAgent, until, type DecodedSpan, type TracingAgent } from "../network/harness";
import { startNghttpd, type NghttpdServer } from "./harness";
import { attachedTarget } from "./library-case";

setDefaultTimeout(60_000);

const isRoot = process.getuid?.() === 0;
const missing = ["nghttpd", "nghttp", "curl", "openssl", "protoc"].filter((b) => !Bun.which(b));

describe.skipIf(!isRoot || missing.length > 0)(`HTTP/2 over TLS spans${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  let t: TracingAgent;
  let server: NghttpdServer;
  let port = 0;
  let nghttpPid = 0;
  let curlPid = 0;

  beforeAll(async () => {
    t = await startTracingAgent(`    network:
      enabled: true
      tls: true
      max_spans_per_second: 100000`);
    await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
    server = await startNghttpd({ hello: "hello\n", "a/b/c": "x".repeat(20_000) });
    port = server.port;
    /* libssl is probed once the agent has seen it mapped (scans 150 ms, 1.5 s and 5 s after an exec): its attach
     * state in /status/ebpf says when. */
    await attachedTarget(t, server.pid, (path) => /\/libssl\.so\.3$/.test(path));
    const base = `https://127.0.0.1:${port}`;
    const nghttp = Bun.spawn(["nghttp", "-n", `${base}/hello?x=1`, `${base}/missing`, `${base}/a/b/c`], { stdout: "ignore", stderr: "inherit" });
    nghttpPid = nghttp.pid;
    expect(await nghttp.exited).toBe(0);
    const curl = Bun.spawn(["curl", "-sk", "--http2", "-o", "/dev/null", `${base}/hello`], { stdout: "ignore", stderr: "inherit" });
    curlPid = curl.pid;
    expect(await curl.exited).toBe(0);
  }, 90_000);

  afterAll(async () => {
    await server?.stop();
    await t?.stop();
  });

  test("nghttp's multiplexed requests and curl's are exact SERVER and CLIENT spans with url.scheme https", async () => {
    let spans: DecodedSpan[] = [];
    const of = (pid: number, kind: string) => spans.filter((s) => s.attributes["process.pid"] === pid && s.kind === kind && !s.name.startsWith("CONNECT"));
    const rows = (list: DecodedSpan[]) => list.map((s) => `${s.attributes["http.request.method"]} ${s.attributes["url.path"]} ${s.attributes["http.response.status_code"]}`).sort();
    /* "/" is the readiness probe's request. */
    const serverOf = () => of(server.pid, "SPAN_KIND_SERVER").filter((s) => s.attributes["url.path"] !== "/");
    await until(() => ((spans = decodeSpansWithProtoc(t.collected.traceBodies)), serverOf().length >= 4 && of(nghttpPid, "SPAN_KIND_CLIENT").length >= 3 && of(curlPid, "SPAN_KIND_CLIENT").length >= 1), "4 server and 4 client h2 spans", 20_000).catch((e: Error) => {
      const seen = [...serverOf(), ...of(nghttpPid, "SPAN_KIND_CLIENT"), ...of(curlPid, "SPAN_KIND_CLIENT")].map((s) => `${s.attributes["process.pid"]} ${s.kind} ${rows([s])[0]}`);
      throw new Error(`${e.message}; seen (server ${server.pid}, nghttp ${nghttpPid}, curl ${curlPid}): ${seen.join("; ")}`);
    });
    await Bun.sleep(300);
    spans = decodeSpansWithProtoc(t.collected.traceBodies);
    expect(rows(serverOf())).toEqual(["GET /a/b/c 200", "GET /hello 200", "GET /hello 200", "GET /missing 404"]);
    expect(rows(of(nghttpPid, "SPAN_KIND_CLIENT"))).toEqual(["GET /a/b/c 200", "GET /hello 200", "GET /missing 404"]);
    expect(rows(of(curlPid, "SPAN_KIND_CLIENT"))).toEqual(["GET /hello 200"]);
    for (const s of [...serverOf(), ...of(nghttpPid, "SPAN_KIND_CLIENT"), ...of(curlPid, "SPAN_KIND_CLIENT")]) {
      expect(s.attributes["url.scheme"]).toBe("https");
      expect(s.attributes["network.protocol.version"]).toBe("2");
      expect(s.attributes["server.port"]).toBe(port);
      expect(s.endNs).toBeGreaterThan(s.startNs);
    }
  });
});
