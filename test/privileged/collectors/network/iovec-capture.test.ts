/**
 * Privileged: HTTP/1.x messages moved by readv/writev whose first iovec is empty and whose next one holds more than
 * the kernel's capture (256 bytes). A Python child process is both server and client on loopback: its client
 * writes the request with writev([b"", request]) and reads the response with readv([empty, buffer]); its server does
 * the same the other way. The server and client spans must carry the exact path and status, with either way of
 * capturing HTTP bytes.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startCaptureAgent, until, type TracingAgent } from "./harness";

const isRoot = process.getuid?.() === 0;
const PYTHON = "/usr/bin/python3";

/** Prints the server's port, then serves one exchange to its own client; each message is well over 256 bytes. */
const SCRIPT = `
import os, socket, threading
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
port = srv.getsockname()[1]
req = ("GET /iov/empty-first HTTP/1.1\\r\\nHost: iov\\r\\nX-Pad: " + "x" * 300 + "\\r\\n\\r\\n").encode()
body = b"y" * 300
resp = b"HTTP/1.1 200 OK\\r\\nContent-Length: " + str(len(body)).encode() + b"\\r\\n\\r\\n" + body

def read_until(fd, done):
    got = b""
    while not done(got):
        buf = bytearray(4096)
        n = os.readv(fd, [bytearray(0), buf])
        if n == 0:
            break
        got += bytes(buf[:n])
    return got

def serve():
    c, _ = srv.accept()
    read_until(c.fileno(), lambda g: g.endswith(b"\\r\\n\\r\\n"))
    os.writev(c.fileno(), [b"", resp])
    read_until(c.fileno(), lambda g: False)
    c.close()

t = threading.Thread(target=serve)
t.start()
cl = socket.create_connection(("127.0.0.1", port))
os.writev(cl.fileno(), [b"", req])
got = read_until(cl.fileno(), lambda g: len(g) >= len(resp))
cl.close()
t.join()
print(port, len(got), flush=True)
`;

function suite(mode: "socket" | "syscalls"): void {
  describe.skipIf(!isRoot || !Bun.which(PYTHON))(`readv/writev with an empty first iovec (http_capture: ${mode})`, () => {
    let t: TracingAgent;
    beforeAll(async () => {
      t = await startCaptureAgent(mode);
    }, 60_000);
    afterAll(async () => {
      await t?.stop();
    });

    test("server and client spans carry the path and status", async () => {
      // The kernel refuses exchanges while the ring is half full, whoever's traffic filled it (every process on the
      // machine is traced): a refused exchange is sent again, in a new process, a few times at most.
      for (let attempt = 1; ; attempt++) {
        const p = Bun.spawn([PYTHON, "-c", SCRIPT], { stdout: "pipe", stderr: "inherit" });
        const [port, received] = (await new Response(p.stdout).text()).trim().split(" ").map(Number);
        expect(await p.exited).toBe(0);
        expect(received).toBeGreaterThan(300);
        const ours = () => t.collected.spans.filter((s) => s.attributes["process.pid"] === p.pid && s.attributes["http.request.method"]);
        try {
          await until(() => ours().length >= 2, "the server and client spans of the exchange", 10_000);
        } catch (e) {
          if (attempt < 4) continue;
          throw e;
        }
        const rows = ours().map((s) => `${s.kind} ${s.attributes["http.request.method"]} ${s.attributes["url.path"]} ${s.attributes["http.response.status_code"]} ${s.attributes["server.port"]}`);
        expect(rows.sort()).toEqual([`SPAN_KIND_CLIENT GET /iov/empty-first 200 ${port}`, `SPAN_KIND_SERVER GET /iov/empty-first 200 ${port}`]);
        return;
      }
    }, 90_000);
  });
}

suite("socket");
suite("syscalls");
