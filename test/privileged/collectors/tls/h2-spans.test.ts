/**
 * Privileged e2e: HTTP/2 over TLS through the `tls` set. nghttpd (nghttp2-server: libssl.so.3, its socket I/O
 * inside SSL_read/SSL_write) serves files over TLS with ALPN h2; curl --http2 (libcurl on the same libssl) asks
 * for two paths on one connection. The plaintext frames reach the HTTP/2 parser like cleartext h2: the official
 * OTLP receiver must decode exactly those two exchanges as SERVER spans of nghttpd and CLIENT spans of curl, with
 * network.protocol.version 2 and url.scheme https.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { missingOfficialTools } from "../../../helpers/official-receiver";
import { closedLoopbackPort } from "../../../helpers/ports";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";
import { ATTEMPT_PORTS, firstAttempt, httpsOf, inRange, spans, startTlsAgent, until, type Span, type TlsAgent } from "./harness";

setDefaultTimeout(90_000);

const isRoot = process.getuid?.() === 0;
/** nghttpd lives in /usr/sbin, outside some users' PATH. */
const NGHTTPD = Bun.which("nghttpd", { PATH: `${process.env.PATH ?? ""}:/usr/sbin` });
const missing = [...missingOfficialTools(), ...(Bun.which("curl") ? [] : ["curl"]), ...(NGHTTPD ? [] : ["nghttpd (nghttp2-server)"])];

let t: TlsAgent | undefined;
let server: Bun.Subprocess<"ignore", "ignore", "inherit"> | undefined;
let cert: SelfSignedCert | undefined;
let docroot = "";
let port = 0;

describe.skipIf(!isRoot || missing.length > 0)(`HTTP/2 over TLS from the TLS uprobes${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  beforeAll(async () => {
    cert = makeSelfSignedCert();
    docroot = mkdtempSync(join(tmpdir(), "svc-h2-docroot-"));
    writeFileSync(join(docroot, "hello.txt"), "hello over h2\n");
    t = await startTlsAgent();
    port = closedLoopbackPort();
    server = Bun.spawn([NGHTTPD!, "--address", "127.0.0.1", "-d", docroot, String(port), `${cert.dir}/key.pem`, cert.certPath], { stdin: "ignore", stdout: "ignore", stderr: "inherit" });
    await until("nghttpd listening", async () => await fetch(`http://127.0.0.1:${port}/`).then(() => true, (e: Error) => (/ECONNREFUSED|Unable to connect/i.test(e.message) ? undefined : true)));
  });

  afterAll(async () => {
    server?.kill();
    await server?.exited;
    await t?.stop();
    if (cert) rmSync(cert.dir, { recursive: true, force: true });
    if (docroot) rmSync(docroot, { recursive: true, force: true });
  });

  test("two requests on one h2 connection become two SERVER and two CLIENT spans, version 2, url.scheme https", async () => {
    const serverPid = server!.pid;
    await until("libssl attached for nghttpd", async () => ((await t!.targets()).some((x) => x.state === "attached" && x.pids.includes(serverPid)) ? true : undefined));
    const base = `https://127.0.0.1:${port}`;
    const serverOf = (all: Span[], lo: number) => httpsOf(all, serverPid, "SPAN_KIND_SERVER").filter((s) => inRange(s.attributes["client.port"], lo));
    const attempt = await firstAttempt(t!, async (_i, lo) => {
      const curl = Bun.spawn(["curl", "-sk", "--http2", "--local-port", `${lo}-${lo + ATTEMPT_PORTS - 1}`, "-o", "/dev/null", "-o", "/dev/null", `${base}/hello.txt`, `${base}/missing`], { stdout: "ignore", stderr: "pipe" });
      expect(await curl.exited).toBe(0);
      return { value: curl.pid, arrivedWhen: (all) => serverOf(spans(all), lo).length >= 2 && httpsOf(spans(all), curl.pid, "SPAN_KIND_CLIENT").length >= 2 };
    });
    expect(attempt).toBeDefined();
    await Bun.sleep(500);
    const all = spans(t!.rx.requests());
    const summary = (list: Span[]) =>
      list.map((s) => [s.attributes["http.request.method"], s.attributes["url.path"], s.attributes["http.response.status_code"], s.attributes["network.protocol.version"]]).sort((a, b) => String(a[1]).localeCompare(String(b[1])));
    const expected = [
      ["GET", "/hello.txt", 200, "2"],
      ["GET", "/missing", 404, "2"],
    ];
    expect(summary(serverOf(all, attempt!.lo))).toEqual(expected);
    expect(summary(httpsOf(all, attempt!.value, "SPAN_KIND_CLIENT"))).toEqual(expected);
  });
});
