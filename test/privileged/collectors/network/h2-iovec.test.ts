/**
 * Privileged: HTTP/2 moved by writev/sendmsg calls of many small iovecs and read by readv. The kernel reads an
 * HTTP/2 call's iovec array in one user read and then each iovec's bytes; a wrong count or array would leave
 * frames out, and the HPACK state of the connection with them. A Python child process (python3-h2 builds the
 * frames) is server and client on loopback: every call after the connection's first bytes goes out cut into up
 * to 30 iovecs behind an empty one (the client by sendmsg, the server by writev), runs of iovecs that continue
 * one another in memory broken by ones that do not, and each side reads with
 * readv([empty, buffer]). Two requests on the connection (the second's header block refers to the first's in the
 * HPACK dynamic table) must be server and client spans with their exact paths and statuses, with either way of
 * capturing HTTP bytes.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startCaptureAgent, until, type TracingAgent } from "./harness";

const isRoot = process.getuid?.() === 0;
const PYTHON = "/usr/bin/python3";
const hasH2 = Bun.spawnSync([PYTHON, "-c", "import h2"]).exitCode === 0;

/** Prints the server's port and the iovecs of its largest call once both requests were answered. */
const SCRIPT = `
import os, socket, threading
import h2.config, h2.connection, h2.events

srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
port = srv.getsockname()[1]
most = [0]

def pieces(data, first):
    # An empty iovec, then the first bytes whole (they tell the kernel the connection is HTTP/2), then the rest cut
    # into pieces of 5 bytes, at most 30 iovecs in all: slices of the one buffer (iovecs that continue one another,
    # which the kernel reads as one run) but for every third piece, a copy of its own elsewhere (which ends a run).
    mv = memoryview(data)
    out = [b"", mv[:first]]
    at = first
    while at < len(data) and len(out) < 29:
        piece = mv[at:at + 5]
        out.append(bytes(piece) if len(out) % 3 == 0 else piece)
        at += 5
    if at < len(data):
        out.append(mv[at:])
    most[0] = max(most[0], len(out))
    return out

def send(sock, data, first, use_sendmsg):
    iov = pieces(data, first)
    n = sock.sendmsg(iov) if use_sendmsg else os.writev(sock.fileno(), iov)
    assert n == len(data), (n, len(data))

def receive(sock):
    buf = bytearray(65536)
    n = os.readv(sock.fileno(), [bytearray(0), buf])
    return bytes(buf[:n])

def serve():
    c, _ = srv.accept()
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False))
    conn.initiate_connection()
    first = True
    answered = 0
    while answered < 2:
        data = receive(c)
        if not data:
            break
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.RequestReceived):
                path = dict(ev.headers)[b":path"]
                status = b"201" if path.startswith(b"/iov/h2-first") else b"404"
                conn.send_headers(ev.stream_id, [(b":status", status), (b"content-type", b"text/plain"), (b"x-pad", b"p" * 40)])
                conn.send_data(ev.stream_id, b"answer " * 8, end_stream=True)
                answered += 1
        out = conn.data_to_send()
        if out:
            send(c, out, 9 if first else 1, False)
            first = False
    while receive(c):
        pass
    c.close()

t = threading.Thread(target=serve)
t.start()
cl = socket.create_connection(("127.0.0.1", port))
conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
conn.initiate_connection()
headers = lambda path: [(b":method", b"GET"), (b":path", path), (b":scheme", b"http"), (b":authority", b"iov.test"), (b"user-agent", b"iovec-test"), (b"x-pad", b"q" * 40)]
conn.send_headers(1, headers(b"/iov/h2-first?x=1"), end_stream=True)
send(cl, conn.data_to_send(), 24, True)
ended = set()
while len(ended) < 2:
    data = receive(cl)
    if not data:
        break
    for ev in conn.receive_data(data):
        if isinstance(ev, h2.events.StreamEnded):
            ended.add(ev.stream_id)
            if ev.stream_id == 1:
                conn.send_headers(3, headers(b"/iov/h2-second"), end_stream=True)
    out = conn.data_to_send()
    if out:
        send(cl, out, 1, True)
cl.close()
t.join()
print(port, len(ended), most[0], flush=True)
`;

function suite(mode: "socket" | "syscalls"): void {
  describe.skipIf(!isRoot || !hasH2)(`HTTP/2 in many iovecs (http_capture: ${mode})${hasH2 ? "" : " (missing python3-h2)"}`, () => {
    let t: TracingAgent;
    beforeAll(async () => {
      t = await startCaptureAgent(mode);
    }, 60_000);
    afterAll(async () => {
      await t?.stop();
    });

    test("both streams are server and client spans with their paths and statuses", async () => {
      const p = Bun.spawn([PYTHON, "-c", SCRIPT], { stdout: "pipe", stderr: "inherit" });
      const [port, ended, most] = (await new Response(p.stdout).text()).trim().split(" ").map(Number);
      expect(await p.exited).toBe(0);
      expect(ended).toBe(2);
      // Calls of many iovecs were made (the test's point), and none over the kernel's 32.
      expect(most).toBeGreaterThan(20);
      expect(most).toBeLessThanOrEqual(32);
      const ours = () => t.collected.spans.filter((s) => s.attributes["process.pid"] === p.pid && s.attributes["http.request.method"]);
      await until(() => ours().length >= 4, "the server and client spans of both streams", 15_000);
      const rows = ours().map((s) => `${s.kind} ${s.attributes["network.protocol.version"]} ${s.attributes["url.path"]} ${s.attributes["http.response.status_code"]} ${s.attributes["server.port"]}`);
      expect(rows.sort()).toEqual([
        `SPAN_KIND_CLIENT 2 /iov/h2-first 201 ${port}`,
        `SPAN_KIND_CLIENT 2 /iov/h2-second 404 ${port}`,
        `SPAN_KIND_SERVER 2 /iov/h2-first 201 ${port}`,
        `SPAN_KIND_SERVER 2 /iov/h2-second 404 ${port}`,
      ]);
      expect(t.collected.spans.filter((s) => s.attributes["process.pid"] === p.pid && s.attributes["http.request.method"]).length).toBe(4);
    }, 60_000);
  });
}

suite("socket");
suite("syscalls");
