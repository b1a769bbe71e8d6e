/**
 * Privileged e2e: OpenSSL linked statically. node carries OpenSSL with its symbols: the `tls` set finds
 * SSL_read/SSL_write in the executable and probes it (kind `static`); an https server in node answered by curl
 * gives SERVER spans of node (url.scheme https) decoded by the official OTLP receiver. node does its socket I/O
 * outside the SSL calls, through memory BIOs: the socket is found from the thread's socket calls around them, so the
 * spans carry the connection's addresses.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { realpathSync, rmSync } from "node:fs";
import { resolve } from "node:path";
import { missingOfficialTools } from "../../../helpers/official-receiver";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";
import { firstAttempt, httpsOf, spans, startPortServer, startTlsAgent, until, type Span, type TlsAgent } from "./harness";

setDefaultTimeout(90_000);

const isRoot = process.getuid?.() === 0;
const NODE = Bun.which("node");
/** A node built against the system's libssl (Debian's nodejs) is traced through libssl: no static case to test. */
const NODE_STATIC = NODE !== null && !Bun.spawnSync(["ldd", NODE]).stdout.toString().includes("libssl");
const missing = [...missingOfficialTools(), ...(Bun.which("curl") ? [] : ["curl"]), ...(NODE ? (NODE_STATIC ? [] : ["a node with OpenSSL linked in (this one uses the shared libssl)"]) : ["node"])];
const SERVER = resolve(import.meta.dir, "../../../fixtures/node-https-server.cjs");

let t: TlsAgent | undefined;
let server: Bun.Subprocess<"ignore", "pipe", "inherit"> | undefined;
let cert: SelfSignedCert | undefined;
let port = 0;

describe.skipIf(!isRoot || missing.length > 0)(`statically linked OpenSSL${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  beforeAll(async () => {
    cert = makeSelfSignedCert();
    t = await startTlsAgent();
    ({ proc: server, port } = await startPortServer([NODE!, SERVER, cert.certPath, `${cert.dir}/key.pem`]));
  });

  afterAll(async () => {
    server?.kill();
    await server?.exited;
    await t?.stop();
    if (cert) rmSync(cert.dir, { recursive: true, force: true });
  });

  test("node is probed by its own SSL_* symbols and its HTTPS requests become SERVER spans with url.scheme https", async () => {
    const serverPid = server!.pid;
    const target = await until("node's executable probed", async () => (await t!.targets()).find((x) => x.pids.includes(serverPid) && x.state === "attached"));
    expect(target).toMatchObject({ kind: "static", path: realpathSync(NODE!) });
    expect(target.functions).toEqual(expect.arrayContaining(["SSL_read", "SSL_write"]));
    // Each attempt asks for paths of its own (node's spans carry no client port to tell attempts apart).
    const mine = (all: Span[], i: number) => httpsOf(all, serverPid, "SPAN_KIND_SERVER").filter((s) => String(s.attributes["url.path"]).endsWith(`-${i}`));
    const base = `https://127.0.0.1:${port}`;
    const attempt = await firstAttempt(t!, async (i) => {
      const curl = Bun.spawn(["curl", "-sk", "--http1.1", "-o", "/dev/null", "-o", "/dev/null", `${base}/hello-${i}`, `${base}/missing-${i}`], { stdout: "ignore", stderr: "pipe" });
      expect(await curl.exited).toBe(0);
      return { value: i, arrivedWhen: (all) => mine(spans(all), i).length >= 2 };
    });
    expect(attempt).toBeDefined();
    await Bun.sleep(500);
    const got = mine(spans(t!.rx.requests()), attempt!.value);
    expect(got.map((s) => [s.attributes["http.request.method"], s.attributes["url.scheme"], s.attributes["http.response.status_code"], s.attributes["server.port"]])).toEqual([
      ["GET", "https", 200, port],
      ["GET", "https", 404, port],
    ]);
    for (const s of got) expect(s.attributes).toMatchObject({ "client.address": "127.0.0.1", "network.local.address": "127.0.0.1", "network.local.port": port });
    expect(got[0]!.attributes["client.port"]).toBeGreaterThan(0);
  });
});
