/**
 * Privileged e2e: HTTPS through an HTTP proxy's CONNECT tunnel. curl writes `CONNECT` in cleartext on its socket to
 * the proxy, then TLS over the same socket. The network set stops running the TLS set's socket part on connections
 * known to carry cleartext HTTP (network.bpf.c known_cleartext), but not on one that carried a CONNECT: curl's SSL
 * calls must still find their socket there, so its HTTPS CLIENT span has the proxy as its network peer. The server
 * (Python's http.server in ssl) sees the tunnel's other leg and gives the SERVER span.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { rmSync } from "node:fs";
import { resolve } from "node:path";
import { missingOfficialTools } from "../../../helpers/official-receiver";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";
import { httpsOf, spans, startPortServer, startTlsAgent, until, type TlsAgent } from "./harness";

setDefaultTimeout(90_000);

const isRoot = process.getuid?.() === 0;
const missing = [...missingOfficialTools(), ...(Bun.which("curl") ? [] : ["curl"]), ...(Bun.which("openssl") ? [] : ["openssl"])];
const SERVER = resolve(import.meta.dir, "../../../fixtures/https-server.py");

/** A CONNECT-only proxy: prints its port, then for each client reads the CONNECT head, answers 200 and relays bytes. */
const PROXY = `
import socket, threading
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(8)
print(srv.getsockname()[1], flush=True)
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def handle(c):
    head = b""
    while b"\\r\\n\\r\\n" not in head:
        head += c.recv(4096)
    host, port = head.split(b" ")[1].decode().rsplit(":", 1)
    up = socket.create_connection((host, int(port)))
    c.sendall(b"HTTP/1.1 200 Connection established\\r\\n\\r\\n")
    threading.Thread(target=pipe, args=(up, c), daemon=True).start()
    pipe(c, up)
while True:
    c, _ = srv.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
`;

let t: TlsAgent | undefined;
let server: Bun.Subprocess<"ignore", "pipe", "inherit"> | undefined;
let proxy: Bun.Subprocess<"ignore", "pipe", "inherit"> | undefined;
let cert: SelfSignedCert | undefined;
let port = 0;
let proxyPort = 0;

describe.skipIf(!isRoot || missing.length > 0)(`HTTPS through a CONNECT proxy${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  beforeAll(async () => {
    cert = makeSelfSignedCert();
    t = await startTlsAgent();
    ({ proc: server, port } = await startPortServer(["/usr/bin/python3", SERVER, cert.certPath, `${cert.dir}/key.pem`]));
    ({ proc: proxy, port: proxyPort } = await startPortServer(["/usr/bin/python3", "-c", PROXY]));
  });

  afterAll(async () => {
    for (const p of [server, proxy]) {
      p?.kill();
      await p?.exited;
    }
    await t?.stop();
    if (cert) rmSync(cert.dir, { recursive: true, force: true });
  });

  test("curl's HTTPS request in the tunnel is a CLIENT span whose peer is the proxy, and the server's SERVER span", async () => {
    const serverPid = server!.pid;
    await until("libssl attached for the server", async () => ((await t!.targets()).find((y) => y.kind === "shared" && y.pids.includes(serverPid))?.state === "attached" ? true : undefined));
    const curl = Bun.spawn(["curl", "-sk", "--http1.1", "--proxy", `http://127.0.0.1:${proxyPort}`, "-o", "/dev/null", "-w", "%{http_code}", `https://127.0.0.1:${port}/through/proxy`], {
      stdout: "pipe",
      stderr: "inherit",
    });
    expect(await new Response(curl.stdout).text()).toBe("200");
    expect(await curl.exited).toBe(0);
    const arrived = () => {
      const all = spans(t!.rx.requests());
      const client = httpsOf(all, curl.pid, "SPAN_KIND_CLIENT");
      const srv = httpsOf(all, serverPid, "SPAN_KIND_SERVER").filter((s) => s.attributes["url.path"] === "/through/proxy");
      return client.length >= 1 && srv.length >= 1 ? { client, srv } : undefined;
    };
    const got = await until("curl's CLIENT span and the server's SERVER span", async () => {
      void fetch(`${t!.agent.url}/admin/flush`, { method: "POST" }).catch(() => {});
      return arrived();
    });
    expect(got.client.map((s) => [s.attributes["http.request.method"], s.attributes["url.path"], s.attributes["http.response.status_code"], s.attributes["network.peer.port"]])).toEqual([
      ["GET", "/through/proxy", 200, proxyPort],
    ]);
    expect(got.srv.map((s) => [s.attributes["http.request.method"], s.attributes["http.response.status_code"], s.attributes["server.port"]])).toEqual([["GET", 200, port]]);
  });
});
