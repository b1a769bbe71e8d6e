/**
 * Privileged: BoringSSL as a shared library. Debian's android-libboringssl ships BoringSSL's own libssl.so.0 (with its
 * SSL_read/SSL_write symbols, and no SSL_read_ex/SSL_write_ex). A small HTTPS server built against it (the test
 * compiles test/fixtures/boringssl-https-server.c) answers curl (OpenSSL's libssl.so.3) three requests on one
 * keep-alive connection, and bssl-tool (android-boringssl's client, on the same libssl.so.0) sends one to Python's
 * https server. /status/ebpf lists BoringSSL's libssl as attached; each side gives exactly its spans (decoded by
 * protoc) and its counts in the HTTP RED metrics, with url.scheme https and the connection's addresses.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";
import { firstLine, waitUntil } from "../../../helpers/wait";
import { decodeSpansWithProtoc, startTracingAgent, until, type DecodedSpan, type TracingAgent } from "../network/harness";

setDefaultTimeout(90_000);

const BSSL = "bssl-tool";
const BORINGSSL_LIB = "/usr/lib/x86_64-linux-gnu/android";
const BORINGSSL_INCLUDE = "/usr/include/android";
const SERVER = resolve(import.meta.dir, "../../../fixtures/https-server.py");
const BSSL_SERVER_SOURCE = resolve(import.meta.dir, "../../../fixtures/boringssl-https-server.c");
const isRoot = process.getuid?.() === 0;
const missing = [
  ...(Bun.which(BSSL) ? [] : ["bssl-tool (android-boringssl)"]),
  ...(Bun.spawnSync(["test", "-e", `${BORINGSSL_LIB}/libssl.so`]).exitCode === 0 ? [] : ["android-libboringssl-dev"]),
  ...["curl", "openssl", "protoc", "gcc"].filter((b) => !Bun.which(b)),
];

/** Builds the BoringSSL HTTPS server fixture; returns its path. */
function buildBoringSslServer(): string {
  const dir = mkdtempSync(join(tmpdir(), "svc-boringssl-"));
  const out = join(dir, "boringssl-https-server");
  const cc = Bun.spawnSync(["gcc", "-O1", `-I${BORINGSSL_INCLUDE}`, "-o", out, BSSL_SERVER_SOURCE, `-L${BORINGSSL_LIB}`, "-lssl", "-lcrypto", `-Wl,-rpath,${BORINGSSL_LIB}`], { stderr: "pipe" });
  if (cc.exitCode !== 0) throw new Error(`gcc failed: ${cc.stderr.toString()}`);
  return out;
}

interface TlsTarget {
  path: string;
  kind: string;
  state: string;
  functions: string[];
  pids: number[];
}

describe.skipIf(!isRoot || missing.length > 0)(`BoringSSL (shared)${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  let t: TracingAgent;
  let cert: SelfSignedCert;
  const children: Bun.Subprocess[] = [];
  let bsslServer: Bun.Subprocess<"ignore", "pipe", "inherit">;
  let bsslBinary = "";
  let bsslPort = 0;
  let pyPort = 0;
  let pyPid = 0;
  let curlPid = 0;
  let bsslClientPid = 0;
  let bsslLib: TlsTarget | undefined;
  let spans: DecodedSpan[] = [];

  const targets = async () => (((await (await t.agent.request("/status/ebpf")).json()) as { tls?: TlsTarget[] }).tls ?? []);
  const attachedFor = (pid: number, lib: RegExp) => async () => (await targets()).find((x) => x.state === "attached" && x.pids.includes(pid) && lib.test(x.path));

  beforeAll(async () => {
    cert = makeSelfSignedCert();
    t = await startTracingAgent(`    network:
      enabled: true
      tls: true
      max_spans_per_second: 1000000
      metrics_interval: 1s`);
    await until(() => t.agent.agent.status.component("ebpf/tls")?.state === "ok", "ebpf/tls ok", 30_000);
    bsslBinary = buildBoringSslServer();
    bsslServer = Bun.spawn([bsslBinary, cert.certPath, `${cert.dir}/key.pem`], { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
    children.push(bsslServer);
    bsslPort = Number(await firstLine(bsslServer.stdout));
    const py = Bun.spawn(["/usr/bin/python3", SERVER, cert.certPath, `${cert.dir}/key.pem`], { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
    children.push(py);
    pyPid = py.pid;
    pyPort = Number(await firstLine(py.stdout));
    bsslLib = await waitUntil(attachedFor(bsslServer.pid, /\/libssl\.so\.0$/), { what: "BoringSSL's libssl attached", timeoutMs: 30_000, intervalMs: 100 });
    await waitUntil(attachedFor(pyPid, /\/libssl\.so\.3$/), { what: "the python server's libssl attached", timeoutMs: 30_000, intervalMs: 100 });

    const base = `https://127.0.0.1:${bsslPort}`;
    const curl = Bun.spawn(["curl", "-sk", "--http1.1", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", `${base}/from-curl`, `${base}/missing`, `${base}/again`], { stdout: "ignore", stderr: "inherit" });
    curlPid = curl.pid;
    expect(await curl.exited).toBe(0);

    /* The client sends its request once its libssl is probed. */
    const client = Bun.spawn([BSSL, "client", "-connect", `127.0.0.1:${pyPort}`], { stdin: "pipe", stdout: "pipe", stderr: "ignore" });
    bsslClientPid = client.pid;
    await waitUntil(attachedFor(bsslClientPid, /\/libssl\.so\.0$/), { what: "bssl client's libssl attached", timeoutMs: 30_000, intervalMs: 100 });
    client.stdin.write("GET /from-bssl HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    await client.stdin.flush();
    const reader = client.stdout.getReader();
    let out = "";
    while (!out.includes("hello /from-bssl")) {
      const { value, done } = await reader.read();
      if (done) break;
      out += new TextDecoder().decode(value);
    }
    reader.releaseLock();
    expect(out).toContain("HTTP/1.1 200 OK");
    client.kill();
    await client.exited;
  }, 90_000);

  afterAll(async () => {
    for (const c of children) c.kill();
    await Promise.all(children.map((c) => c.exited));
    await t?.stop();
    if (cert) rmSync(cert.dir, { recursive: true, force: true });
    if (bsslBinary) rmSync(resolve(bsslBinary, ".."), { recursive: true, force: true });
  });

  test("BoringSSL's libssl.so.0 is probed at SSL_read and SSL_write", () => {
    expect(bsslLib).toMatchObject({ kind: "shared", path: "/usr/lib/x86_64-linux-gnu/android/libssl.so.0" });
    expect(bsslLib!.functions).toEqual(expect.arrayContaining(["SSL_read", "SSL_write"]));
  });

  test("the BoringSSL server's and bssl-tool's requests are exact spans on both sides, with url.scheme https", async () => {
    const of = (pid: number, kind: string) => spans.filter((s) => s.attributes["process.pid"] === pid && s.kind === kind && s.attributes["url.scheme"] === "https");
    const row = (s: DecodedSpan) => `${s.attributes["http.request.method"]} ${s.attributes["url.path"]} ${s.attributes["http.response.status_code"]} ${s.attributes["server.port"]}`;
    const byStart = (list: DecodedSpan[]) => [...list].sort((a, b) => (a.startNs < b.startNs ? -1 : 1));
    await until(() => ((spans = t.collected.spans), of(bsslServer.pid, "SPAN_KIND_SERVER").length >= 3 && of(curlPid, "SPAN_KIND_CLIENT").length >= 3 && of(bsslClientPid, "SPAN_KIND_CLIENT").length >= 1 && of(pyPid, "SPAN_KIND_SERVER").length >= 1), "bssl server and client spans", 30_000).catch((e: Error) => {
      const mine = t.collected.spans.filter((s) => [bsslServer.pid, curlPid, bsslClientPid, pyPid].includes(Number(s.attributes["process.pid"])));
      throw new Error(`${e.message}; seen: ${mine.map((s) => `${s.attributes["process.pid"]} ${s.kind} ${s.name} ${s.attributes["url.path"]} ${s.attributes["http.response.status_code"]}`).join("; ")}`);
    });
    await Bun.sleep(300);
    spans = decodeSpansWithProtoc(t.collected.traceBodies);
    const curlRows = [`GET /from-curl 200 ${bsslPort}`, `GET /missing 404 ${bsslPort}`, `GET /again 200 ${bsslPort}`];
    expect(byStart(of(bsslServer.pid, "SPAN_KIND_SERVER")).map(row)).toEqual(curlRows);
    expect(byStart(of(curlPid, "SPAN_KIND_CLIENT")).map(row)).toEqual(curlRows);
    expect(of(bsslClientPid, "SPAN_KIND_CLIENT").map(row)).toEqual([`GET /from-bssl 200 ${pyPort}`]);
    expect(of(pyPid, "SPAN_KIND_SERVER").map(row)).toEqual([`GET /from-bssl 200 ${pyPort}`]);
    for (const s of of(bsslServer.pid, "SPAN_KIND_SERVER")) expect(s.attributes).toMatchObject({ "client.address": "127.0.0.1", "network.local.port": bsslPort });
    const client = of(bsslClientPid, "SPAN_KIND_CLIENT")[0]!;
    expect(client.attributes).toMatchObject({ "server.address": "127.0.0.1", "network.peer.port": pyPort });
  });

  test("the HTTP RED metrics count each once, with url.scheme https", async () => {
    const count = (metric: string, port: number, status: number) => t.collected.total(metric, (a) => a["server.port"] === port && a["url.scheme"] === "https" && a["http.response.status_code"] === status && a["http.request.method"] === "GET");
    const all = (metric: string, port: number) => t.collected.total(metric, (a) => a["server.port"] === port);
    await until(() => all("http.server.request.duration", bsslPort) >= 3 && all("http.client.request.duration", bsslPort) >= 3 && all("http.client.request.duration", pyPort) >= 1, "RED points", 20_000);
    await Bun.sleep(1500);
    for (const metric of ["http.server.request.duration", "http.client.request.duration"]) {
      expect([count(metric, bsslPort, 200), count(metric, bsslPort, 404), all(metric, bsslPort)]).toEqual([2, 1, 3]);
      expect([count(metric, pyPort, 200), all(metric, pyPort)]).toEqual([1, 1]);
    }
  });
});
