/**
 * Privileged e2e: dist/svc-agent with the `tls` set on the real kernel. Python's http.server wrapped in ssl
 * (/usr/bin/python3, whose _ssl module links libssl.so.3 dynamically) serves HTTPS; curl (libcurl, the same
 * libssl) sends a known set of requests on one keep-alive connection. The spans decoded by the official OTLP
 * receiver (protoc-generated Python, Debian's grpcio) must be exactly those requests, as SERVER spans of the
 * Python process and CLIENT spans of curl, with url.scheme https and the connection's addresses.
 * /status/ebpf lists libssl as attached with the server's pid; once the server exits its pid is released. A libssl
 * no process maps any more keeps its probes (the same kernel links) for the next process that maps it, and says
 * when they go. Bun (this
 * test's runner) carries BoringSSL without symbols: it is listed as not traceable, with the reason.
 * HTTPS exchanges count in the HTTP RED metrics: a known number of requests per status, counted exactly (in the
 * kernel, outside the span budget) on both sides with url.scheme https; a request whose connection the server closes
 * without answering counts with error.type connection_closed on both sides, as in cleartext; requests replaced by a
 * pipelined one before their response count in svc_ebpf_network_dropped_total{reason="red_replaced"}.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { rmSync } from "node:fs";
import { resolve } from "node:path";
import { missingOfficialTools } from "../../../helpers/official-receiver";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";
import { ATTEMPT_PORTS, libsslCopy, probeLinks, firstAttempt, flushUntil, histogram, httpsOf, inRange, spans, startPortServer, startTlsAgent, until, type Span, type TlsAgent } from "./harness";

setDefaultTimeout(90_000);

const isRoot = process.getuid?.() === 0;
const missing = [...missingOfficialTools(), ...(Bun.which("curl") ? [] : ["curl"]), ...(Bun.which("openssl") ? [] : ["openssl"])];
const SERVER = resolve(import.meta.dir, "../../../fixtures/https-server.py");

const PIPELINED = resolve(import.meta.dir, "../../../fixtures/pipelined-http.py");
const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID = "00f067aa0ba902b7";
const TRACEPARENT = `00-${TRACE_ID}-${PARENT_ID}-01`;

let t: TlsAgent | undefined;
let server: Bun.Subprocess<"ignore", "pipe", "inherit"> | undefined;
let cert: SelfSignedCert | undefined;
let port = 0;

describe.skipIf(!isRoot || missing.length > 0)(`HTTPS spans from the TLS uprobes${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  beforeAll(async () => {
    cert = makeSelfSignedCert();
    t = await startTlsAgent();
    ({ proc: server, port } = await startPortServer(["/usr/bin/python3", SERVER, cert.certPath, `${cert.dir}/key.pem`]));
  });

  afterAll(async () => {
    server?.kill();
    await server?.exited;
    await t?.stop();
    if (cert) rmSync(cert.dir, { recursive: true, force: true });
  });

  test("libssl of the running server is attached, then its requests become exact SERVER and CLIENT spans with url.scheme https", async () => {
    const serverPid = server!.pid;
    const lib = await until("libssl attached for the server", async () => {
      const x = (await t!.targets()).find((y) => y.kind === "shared" && y.pids.includes(serverPid));
      return x?.state === "attached" ? x : undefined;
    });
    expect(lib.path).toMatch(/libssl\.so\.3$/);
    expect(lib.functions).toEqual(expect.arrayContaining(["SSL_read", "SSL_write"]));

    const base = `https://127.0.0.1:${port}`;
    const expected = [
      ["GET", "/hello", 200],
      ["GET", "/missing", 404],
      ["GET", "/a/b/c", 200],
      ["POST", "/submit", 201],
    ];
    // Spans of one attempt: curl's own (its pid) and the server's for connections from curl's port range.
    const serverOf = (all: Span[], lo: number) => httpsOf(all, serverPid, "SPAN_KIND_SERVER").filter((s) => inRange(s.attributes["client.port"], lo));
    const attempt = await firstAttempt(t!, async (_i, lo) => {
      const range = ["--local-port", `${lo}-${lo + ATTEMPT_PORTS - 1}`];
      const curl = Bun.spawn(
        ["curl", "-sk", "--http1.1", ...range, "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", `${base}/hello?x=1`, `${base}/missing`, `${base}/a/b/c?q=2`,
          "--next", "-sk", "--http1.1", ...range, "-o", "/dev/null", "-d", "k=v", "-H", `traceparent: ${TRACEPARENT}`, `${base}/submit`],
        { stdout: "ignore", stderr: "pipe" },
      );
      expect(await curl.exited).toBe(0);
      return { value: curl.pid, arrivedWhen: (all) => serverOf(spans(all), lo).length >= 4 && httpsOf(spans(all), curl.pid, "SPAN_KIND_CLIENT").length >= 4 };
    });
    expect(attempt).toBeDefined();
    const { lo, value: curlPid } = attempt!;
    expect(t!.rx.requests().flatMap((r) => r.unknown_fields)).toEqual([]);
    // A moment for any extra span to arrive (there must be none).
    await Bun.sleep(500);
    const all = spans(t!.rx.requests());
    const serverSpans = serverOf(all, lo);
    const clientSpans = httpsOf(all, curlPid, "SPAN_KIND_CLIENT");
    const summary = (list: Span[]) => list.map((s) => [s.attributes["http.request.method"], s.attributes["url.path"], s.attributes["http.response.status_code"]]);
    expect(summary(serverSpans)).toEqual(expected);
    expect(summary(clientSpans)).toEqual(expected);
    // The POST carried the caller's trace context: curl's span joins that trace under the caller's span, and the
    // server's joins it too, under curl's span (both ends traced here), or under the caller's span where a flush let it
    // go before curl's span was made.
    const post = (list: Span[]) => list.find((s) => s.attributes["url.path"] === "/submit")!;
    expect([post(clientSpans).traceId, post(clientSpans).parentSpanId]).toEqual([TRACE_ID, PARENT_ID]);
    expect(post(serverSpans).traceId).toBe(TRACE_ID);
    expect([post(clientSpans).spanId, PARENT_ID]).toContain(post(serverSpans).parentSpanId!);
    for (const s of serverSpans) {
      // No segment to template: the route is the path, as in the RED series.
      expect(s.attributes["http.route"]).toBe(s.attributes["url.path"]!);
      expect(s.name).toBe(`${s.attributes["http.request.method"]} ${s.attributes["http.route"]}`);
      expect(s.attributes["server.port"]).toBe(port);
      expect(s.attributes["network.local.address"]).toBe("127.0.0.1");
      expect(s.attributes["client.address"]).toBe("127.0.0.1");
      expect(s.attributes["network.protocol.version"]).toBe("1.1");
    }
    for (const s of clientSpans) {
      expect(s.attributes["server.address"]).toBe("127.0.0.1");
      expect(s.attributes["server.port"]).toBe(port);
      expect(s.attributes["network.peer.port"]).toBe(port);
    }
    // Nothing else from that attempt: no duplicate from SSL_read calling SSL_read_ex, no span of another kind.
    const https = all.filter((s) => s.attributes["url.scheme"] === "https");
    expect(https.filter((s) => inRange(s.attributes["client.port"], lo) || s.attributes["process.pid"] === curlPid).length).toBe(8);
    // The ciphertext on the socket makes no http span.
    expect(all.filter((s) => s.attributes["url.scheme"] === "http" && s.attributes["server.port"] === port)).toEqual([]);
  });

  test("http.server/client.request.duration count each HTTPS request once, per method and status, with url.scheme https", async () => {
    // A server of its own: its port's counts are this test's requests only.
    const { proc: own, port } = await startPortServer(["/usr/bin/python3", SERVER, cert!.certPath, `${cert!.dir}/key.pem`]);
    try {
      await until("libssl attached for the server", async () => ((await t!.targets()).some((x) => x.state === "attached" && x.pids.includes(own.pid)) ? true : undefined));
      const base = `https://127.0.0.1:${port}`;
      const get = (path: string, n: number) => Array.from({ length: n }, () => ["-o", "/dev/null", `${base}${path}`]).flat();
      // 5 x 200, 3 x 404 on one keep-alive connection, then 2 x 201 on another.
      const curl = Bun.spawn(["curl", "-sk", "--http1.1", ...get("/hello", 5), ...get("/missing", 3), "--next", "-sk", "--http1.1", "-o", "/dev/null", "-d", "k=v", `${base}/submit`, "--next", "-sk", "--http1.1", "-o", "/dev/null", "-d", "k=w", `${base}/submit`], {
        stdout: "ignore",
        stderr: "inherit",
      });
      expect(await curl.exited).toBe(0);

      const counts = (metric: string) => {
        const out: Record<string, number> = {};
        for (const p of histogram(t!.rx.requests(), metric)) {
          if (p.attributes["server.port"] !== port) continue;
          const k = `${p.attributes["url.scheme"]} ${p.attributes["http.request.method"]} ${p.attributes["http.response.status_code"]}`;
          out[k] = (out[k] ?? 0) + p.count;
        }
        return out;
      };
      const expected = { "https GET 200": 5, "https GET 404": 3, "https POST 201": 2 };
      const total = (c: Record<string, number>) => Object.values(c).reduce((a, b) => a + b, 0);
      await flushUntil(t!, () => total(counts("http.server.request.duration")) >= 10 && total(counts("http.client.request.duration")) >= 10);
      expect(counts("http.server.request.duration")).toEqual(expected);
      expect(counts("http.client.request.duration")).toEqual(expected);
      const client = histogram(t!.rx.requests(), "http.client.request.duration").find((p) => p.attributes["server.port"] === port)!;
      expect(client.attributes["server.address"]).toBe("127.0.0.1");
      // The ciphertext on the socket is not counted as cleartext HTTP.
      expect(histogram(t!.rx.requests(), "http.server.request.duration").filter((p) => p.attributes["server.port"] === port && p.attributes["url.scheme"] !== "https")).toEqual([]);
    } finally {
      own.kill();
      await own.exited;
    }
  });

  test("pipelined requests replaced before their response: one exchange counted per side, the two others in svc_ebpf_network_dropped_total{reason=\"red_replaced\"}", async () => {
    // Client and server in one python3 (the client writes three requests 100 ms apart before reading; the server
    // answers once it has all three), started once libssl is attached for it.
    const py = Bun.spawn(["/usr/bin/python3", PIPELINED, cert!.certPath, `${cert!.dir}/key.pem`], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
    const replaced = async () => Number((await (await fetch(`${t!.agent.url}/metrics`)).text()).split("\n").find((l) => l.startsWith('svc_ebpf_network_dropped_total{reason="red_replaced"}'))?.split(" ").at(-1) ?? NaN);
    try {
      const lines = py.stdout.pipeThrough(new TextDecoderStream()).getReader();
      const port = Number((await lines.read()).value);
      await until("libssl attached for the pipelining process", async () => ((await t!.targets()).some((x) => x.state === "attached" && x.pids.includes(py.pid)) ? true : undefined));
      const before = await replaced();
      py.stdin.write("\n");
      py.stdin.end();
      expect(await py.exited).toBe(0);
      let rest = "";
      for (let r = await lines.read(); !r.done; r = await lines.read()) rest += r.value;
      // The client's three SSL_writes are three request starts, the server's reads as many as started a request.
      const expected = 2 + (Number(rest.trim()) - 1);
      await until("the replaced requests counted", async () => ((await replaced()) - before >= expected ? true : undefined), 10_000);
      const counts = (metric: string) => histogram(t!.rx.requests(), metric).filter((p) => p.attributes["server.port"] === port && p.attributes["url.scheme"] === "https" && p.attributes["http.response.status_code"] === 200).reduce((n, p) => n + p.count, 0);
      await flushUntil(t!, () => counts("http.server.request.duration") >= 1 && counts("http.client.request.duration") >= 1);
      // 1 counted and the others replaced, per side: the requests sent.
      expect((await replaced()) - before).toBe(expected);
      expect([counts("http.server.request.duration"), counts("http.client.request.duration")]).toEqual([1, 1]);
    } finally {
      py.kill();
      await py.exited;
    }
  });

  test("requests whose connection closes before any response count as transport errors on both sides, as in cleartext", async () => {
    const { proc: own, port } = await startPortServer(["/usr/bin/python3", SERVER, cert!.certPath, `${cert!.dir}/key.pem`]);
    try {
      await until("libssl attached for the server", async () => ((await t!.targets()).some((x) => x.state === "attached" && x.pids.includes(own.pid)) ? true : undefined));
      // Each on a connection of its own, which the server closes after reading the request; then one answered.
      const N = 3;
      for (let i = 0; i < N; i++) {
        const curl = Bun.spawn(["curl", "-sk", "--http1.1", "-o", "/dev/null", `https://127.0.0.1:${port}/close/${i}`], { stdout: "ignore", stderr: "ignore" });
        expect(await curl.exited).toBe(52);
      }
      const ok = Bun.spawn(["curl", "-sk", "--http1.1", "-o", "/dev/null", `https://127.0.0.1:${port}/hello`], { stdout: "ignore", stderr: "inherit" });
      expect(await ok.exited).toBe(0);
      const counts = (metric: string) => {
        const out: Record<string, number> = {};
        for (const p of histogram(t!.rx.requests(), metric)) {
          if (p.attributes["server.port"] !== port) continue;
          const k = `${p.attributes["url.scheme"]} ${p.attributes["http.request.method"]} ${p.attributes["http.response.status_code"] ?? "-"} ${p.attributes["error.type"] ?? "-"}`;
          out[k] = (out[k] ?? 0) + p.count;
        }
        return out;
      };
      const expected = { "https GET - connection_closed": N, "https GET 200 -": 1 };
      const total = (c: Record<string, number>) => Object.values(c).reduce((a, b) => a + b, 0);
      await flushUntil(t!, () => total(counts("http.server.request.duration")) >= N + 1 && total(counts("http.client.request.duration")) >= N + 1);
      expect(counts("http.server.request.duration")).toEqual(expected);
      expect(counts("http.client.request.duration")).toEqual(expected);
    } finally {
      own.kill();
      await own.exited;
    }
  });

  test("Bun, with BoringSSL linked in without symbols, is listed as not traceable with the reason", async () => {
    const runner = await until("this test runner listed", async () => (await t!.targets()).find((x) => x.pids.includes(process.pid)));
    expect(runner).toMatchObject({ kind: "static", state: "not_traceable", functions: [] });
    expect(runner.reason).toBe("BoringSSL linked statically without SSL_read/SSL_write symbols (stripped): not traceable");
  });

  test("the server's exit releases its pid from the library", async () => {
    const pid = server!.pid;
    server!.kill();
    await server!.exited;
    await until("server pid released", async () => ((await t!.targets()).some((x) => x.pids.includes(pid)) ? undefined : true));
  });

  test("a libssl no process maps any more keeps its probes for the next process that maps it, with the time they go", async () => {
    // A private copy of libssl (its own inode): only the processes started here map it.
    const copy = libsslCopy();
    const path = copy.path;
    try {
      const first = copy.hold();
      try {
        await until("the copy attached", async () => (await t!.targets()).find((x) => x.path === path && x.state === "attached" && x.pids.includes(first.pid)));
      } finally {
        await first.stop();
      }
      const links = await probeLinks(t!);
      const idle = await until("the copy held by no process", async () => (await t!.targets()).find((x) => x.path === path && x.processes === 0));
      expect(idle.state).toBe("attached");
      expect(Date.parse(idle.detach_at!) - Date.now()).toBeGreaterThan(30_000);
      const second = copy.hold();
      try {
        const held = await until("the copy held by the next process", async () => (await t!.targets()).find((x) => x.path === path && x.pids.includes(second.pid)));
        expect(held.state).toBe("attached");
        expect(held.detach_at).toBeUndefined();
        // The same kernel links: nothing was detached and attached again.
        expect(await probeLinks(t!)).toEqual(links);
      } finally {
        await second.stop();
      }
    } finally {
      copy.remove();
    }
  });
});
