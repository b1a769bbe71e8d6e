/**
 * Privileged: the network set stops reading a connection's calls for HTTP once they turn out not to carry it
 * (conn.opaque, counted in stats[NOT_HTTP]). TLS records: a connection seen from its start at its handshake, one
 * opened before the set loaded at its first application data record. Another protocol: a connection whose first
 * request bytes are neither HTTP nor a preamble HTTP may follow (PROXY protocol, SOCKS). Cleartext HTTP whose body
 * begins with the bytes of a TLS record stays HTTP, and so does HTTP after a PROXY header, a SOCKS 5 greeting or a
 * request whose method the kernel does not know:
 * their requests are counted (RED maps; no exchange is captured, so that a captured one does not keep the
 * connection read whatever the rule says).
 */
import { describe, expect, test } from "bun:test";
import { embeddedObject, openBpfRuntime } from "../../../../ffi";
import { loadProgramSet } from "../../../../src/ebpf/loader";
import { FeatureProbes } from "../../../../src/ebpf/features";
import { RedMaps, Role } from "../../../../src/collectors/network/red-maps";
import { NetworkStat, networkSetSpec } from "../../../../src/collectors/network/spec";
import { makeSelfSignedCert } from "../../../helpers/self-signed-cert";
import { expectReleased } from "../../ebpf/helpers";
import { firstLine } from "../../../helpers/wait";

const isRoot = process.getuid?.() === 0;
const PYTHON = "/usr/bin/python3";
/** The exchange budget is machine-wide (every process is traced): high enough that other load never spends it. */
const UNLIMITED_EXCHANGES = 1_000_000_000;

/**
 * One TLS connection over loopback, a server thread and a client in one process: prints "open" after the
 * handshake, waits for a line on stdin, then makes `rounds` request/response turns of application data.
 */
const TLS_SCRIPT = `
import socket, ssl, sys, threading
cert, key, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
sctx.load_cert_chain(cert, key)
def serve():
    c, _ = srv.accept()
    s = sctx.wrap_socket(c, server_side=True)
    for _ in range(rounds):
        s.sendall(s.recv(4096).upper())
    s.close()
t = threading.Thread(target=serve)
t.start()
cctx = ssl.create_default_context(cafile=cert)
cl = cctx.wrap_socket(socket.create_connection(("127.0.0.1", srv.getsockname()[1])), server_hostname="127.0.0.1")
print("open", flush=True)
sys.stdin.readline()
for i in range(rounds):
    cl.sendall(b"ping %d" % i)
    assert cl.recv(4096) == b"PING %d" % i
cl.close()
t.join()
print("done", flush=True)
`;

async function networkSet(httpExchangesPerSecond = UNLIMITED_EXCHANGES) {
  const runtime = await openBpfRuntime(process.env);
  const spec = networkSetSpec({ selfPid: 1, http: true, httpCapture: "socket", httpExchangesPerSecond, maxConnections: 4096, kernelBtf: true, redMetrics: true });
  const out = await loadProgramSet(spec, { runtime, probes: new FeatureProbes(runtime), objectBytes: embeddedObject, ringbufSizeBytes: 1 << 20, useRingbuf: true });
  if (!out.ok) throw out.error;
  return {
    set: out.set,
    ciphertext: () => out.set.object.map("stats")!.sumPerCpuU64(NetworkStat.NOT_HTTP),
    close: async () => {
      const ids = out.set.programs.map((p) => p.id).filter((id) => id > 0);
      out.set.close();
      await expectReleased(ids);
    },
  };
}

/** Runs TLS_SCRIPT; `between` runs after the handshake, before the application data. */
async function tlsConnection(rounds: number, between: () => Promise<void>): Promise<void> {
  const cert = makeSelfSignedCert();
  const p = Bun.spawn([PYTHON, "-c", TLS_SCRIPT, cert.certPath, `${cert.dir}/key.pem`, String(rounds)], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  expect(await firstLine(p.stdout)).toBe("open");
  await between();
  p.stdin.write("go\n");
  await p.stdin.end();
  const last = await firstLine(p.stdout);
  expect(await p.exited).toBe(0);
  expect(last).toBe("done");
}

/**
 * A server thread and a client in one process: the client sends argv[1] (hex) alone, the server reads it (and for
 * a SOCKS 5 greeting answers its choice), then the client makes two HTTP/1.1 requests on the connection.
 */
const PREAMBLE_SCRIPT = `
import socket, sys, threading, time
first = bytes.fromhex(sys.argv[1])
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
def serve():
    c, _ = srv.accept()
    got = c.recv(4096)
    assert got == first, got
    if first[:1] == b"\\x05":
        c.sendall(b"\\x05\\x00")
    for _ in range(2):
        req = b""
        while b"\\r\\n\\r\\n" not in req:
            req += c.recv(4096)
        c.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok")
    c.recv(1)
    c.close()
t = threading.Thread(target=serve)
t.start()
s = socket.create_connection(("127.0.0.1", srv.getsockname()[1]))
s.sendall(first)
if first[:1] == b"\\x05":
    assert s.recv(2) == b"\\x05\\x00"
time.sleep(0.05)
for path in (b"/a", b"/b"):
    s.sendall(b"GET " + path + b" HTTP/1.1\\r\\nHost: t\\r\\n\\r\\n")
    got = b""
    while not got.endswith(b"ok"):
        got += s.recv(4096)
s.close()
t.join()
print("done", flush=True)
`;

/** Runs PREAMBLE_SCRIPT with its first bytes `first`; the process's RED counts per role, by method and status (paths summed). */
async function afterPreamble(n: Awaited<ReturnType<typeof networkSet>>, red: RedMaps, first: Uint8Array): Promise<{ server: string[]; client: string[] }> {
  const p = Bun.spawn([PYTHON, "-c", PREAMBLE_SCRIPT, Buffer.from(first).toString("hex")], { stdout: "pipe", stderr: "inherit" });
  expect((await new Response(p.stdout).text()).trim()).toBe("done");
  expect(await p.exited).toBe(0);
  const entries = red.take().entries.filter((e) => e.key.pid === p.pid);
  const of = (role: number) => {
    const sums = new Map<string, number>();
    for (const e of entries.filter((e) => e.key.role === role)) sums.set(`${e.key.method} ${e.key.status}`, (sums.get(`${e.key.method} ${e.key.status}`) ?? 0) + e.count);
    return [...sums].map(([k, c]) => `${k} ${c}`).sort();
  };
  return { server: of(Role.SERVER), client: of(Role.CLIENT) };
}

describe.skipIf(!isRoot || !Bun.which(PYTHON) || !Bun.which("openssl"))("connections that carry no HTTP are not read for it", () => {
  test("a connection seen from its handshake: both of its sockets are marked", async () => {
    const n = await networkSet();
    try {
      const before = n.ciphertext();
      await tlsConnection(3, async () => {});
      // Both sockets (the client's and the server's), whatever other TLS traffic the machine has.
      expect(n.ciphertext() - before).toBeGreaterThanOrEqual(2n);
    } finally {
      await n.close();
    }
  }, 60_000);

  test("a connection opened before the set loaded: marked at its first application data record", async () => {
    let n: Awaited<ReturnType<typeof networkSet>> | undefined;
    let before = 0n;
    try {
      await tlsConnection(3, async () => {
        n = await networkSet();
        before = n.ciphertext();
      });
      expect(n!.ciphertext() - before).toBeGreaterThanOrEqual(2n);
    } finally {
      await n?.close();
    }
  }, 60_000);

  test("cleartext HTTP whose body begins like a TLS record stays HTTP: the next request is read", async () => {
    const n = await networkSet(0);
    const red = new RedMaps(n.set.object, [10]);
    const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: async (req) => new Response(`${new URL(req.url).pathname} ${(await req.arrayBuffer()).byteLength}`) });
    try {
      // The body in a write of its own: 0x17 0x03 0x03, a record length, then bytes.
      const script = `
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
body = bytes([0x17, 0x03, 0x03, 0x00, 0x20]) + b"x" * 32
s.sendall(b"POST /upload HTTP/1.1\\r\\nHost: t\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body))
time.sleep(0.05)
s.sendall(body)
def response():
    got = b""
    while b"\\r\\n\\r\\n" not in got or not got.split(b"\\r\\n\\r\\n", 1)[1]:
        got += s.recv(4096)
    return got
first = response()
s.sendall(b"GET /after-body HTTP/1.1\\r\\nHost: t\\r\\n\\r\\n")
second = response()
print(first.split(b"\\r\\n\\r\\n", 1)[1].decode(), "|", second.split(b"\\r\\n\\r\\n", 1)[1].decode(), flush=True)
s.close()
`;
      const p = Bun.spawn([PYTHON, "-c", script, String(server.port)], { stdout: "pipe", stderr: "inherit" });
      expect((await new Response(p.stdout).text()).trim()).toBe("/upload 37 | /after-body 0");
      expect(await p.exited).toBe(0);
      // The client's side of both requests, each counted once with its method and status.
      const counted = red
        .take()
        .entries.filter((e) => e.key.pid === p.pid && e.key.role === Role.CLIENT)
        .map((e) => `${e.key.method} ${e.key.status} ${e.count}`)
        .sort();
      expect(counted).toEqual(["GET 200 1", "POST 200 1"]);
    } finally {
      await server.stop(true);
      await n.close();
    }
  }, 60_000);

  test("a connection that opens with another protocol is marked; its client and server sockets both", async () => {
    const n = await networkSet(0);
    const red = new RedMaps(n.set.object, [10]);
    try {
      const before = n.ciphertext();
      // A Redis command (RESP): then HTTP on the same connection is not read, neither side counts it.
      const counts = await afterPreamble(n, red, new TextEncoder().encode("*1\r\n$4\r\nPING\r\n"));
      expect(n.ciphertext() - before).toBeGreaterThanOrEqual(2n);
      expect(counts).toEqual({ server: [], client: [] });
    } finally {
      await n.close();
    }
  }, 60_000);

  for (const [name, first] of [
    ["a PROXY protocol v1 header", new TextEncoder().encode("PROXY TCP4 10.1.2.3 10.4.5.6 40000 80\r\n")],
    ["a PROXY protocol v2 header", Uint8Array.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, 0x21, 0x11, 0x00, 0x0c, 10, 1, 2, 3, 10, 4, 5, 6, 0x9c, 0x40, 0x00, 0x50])],
    ["a SOCKS 5 greeting", Uint8Array.from([0x05, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00])],
    ["a request with a method the kernel does not know (WebDAV's PROPFIND)", new TextEncoder().encode("PROPFIND /dav HTTP/1.1\r\nHost: t\r\nDepth: 1\r\n\r\n")],
  ] as const) {
    test(`HTTP after ${name} is counted on both sides`, async () => {
      const n = await networkSet(0);
      const red = new RedMaps(n.set.object, [10]);
      try {
        expect(await afterPreamble(n, red, first)).toEqual({ server: ["GET 200 2"], client: ["GET 200 2"] });
      } finally {
        await n.close();
      }
    }, 60_000);
  }
});
