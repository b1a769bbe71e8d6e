/**
 * Privileged: a local port the agent's connection uses is not the agent's alone. connect() (or bind with
 * SO_REUSEADDR) gives one local address and port to connections to different destinations, so another process
 * can reach a server on this host from the very endpoint the agent exports from. The network set loads with a
 * Python process as "the agent" (selfPid): its connection from 127.0.0.1:X goes to server 127.0.0.1:R; other
 * processes connect from the same 127.0.0.1:X to a server at 127.0.0.1:P and to one at 127.0.0.2:R (the agent's
 * remote port, another loopback address). The servers are this test process's Bun.serve; each gets one HTTP
 * request. 127.0.0.1:R's is the other end of the agent's connection (no RED count); the two others are workloads'
 * like any other (counted once each).
 */
import { describe, expect, test } from "bun:test";
import { embeddedObject, openBpfRuntime } from "../../../../ffi";
import { loadProgramSet } from "../../../../src/ebpf/loader";
import { FeatureProbes } from "../../../../src/ebpf/features";
import { networkSetSpec } from "../../../../src/collectors/network/spec";
import { RedMaps, Role } from "../../../../src/collectors/network/red-maps";
import { expectReleased } from "../../ebpf/helpers";
import { firstLine } from "../../../helpers/wait";

const isRoot = process.getuid?.() === 0;
const PYTHON = "/usr/bin/python3";

/** Connects from 127.0.0.1:<argv[3] or any> to argv[1]:argv[2], prints its local port, waits for a line, then makes one GET of argv[4]. */
const CLIENT = `
import socket, sys
host, port, local, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", local))
s.connect((host, port))
print(s.getsockname()[1], flush=True)
sys.stdin.readline()
s.sendall(b"GET %s HTTP/1.1\\r\\nHost: t\\r\\n\\r\\n" % path.encode())
got = b""
while b"\\r\\n\\r\\n" not in got or not got.split(b"\\r\\n\\r\\n", 1)[1]:
    got += s.recv(4096)
print(got.split(b"\\r\\n\\r\\n", 1)[1].decode(), flush=True)
sys.stdin.readline()
s.close()
`;

function client(host: string, port: number, local: number, path: string) {
  const p = Bun.spawn([PYTHON, "-c", CLIENT, host, String(port), String(local), path], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  return {
    pid: p.pid,
    /* The script prints one line per step and waits for stdin before the next: each read is that line alone. */
    line: () => firstLine(p.stdout),
    next: () => p.stdin.write("\n"),
    end: async () => {
      p.stdin.write("\n");
      await p.stdin.end();
      return p.exited;
    },
  };
}

describe.skipIf(!isRoot || !Bun.which(PYTHON))("the agent's own endpoints with a shared local port", () => {
  test("another process's connection from the agent's address and port to a server on this host is counted; the agent's peer is not", async () => {
    const exporterSide = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("receiver") });
    const workload = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("workload") });
    const samePort = Bun.serve({ hostname: "127.0.0.2", port: exporterSide.port, fetch: () => new Response("same port") });
    // "The agent": connected before the set loads (its connection first seen at its first write).
    const agent = client("127.0.0.1", exporterSide.port!, 0, "/export");
    const shared = Number(await agent.line());
    const runtime = await openBpfRuntime(process.env);
    // No exchange captured (budget 0): what is counted shows in the RED maps alone.
    const spec = networkSetSpec({ selfPid: agent.pid, http: true, httpCapture: "socket", httpExchangesPerSecond: 0, maxConnections: 4096, kernelBtf: true, redMetrics: true });
    const out = await loadProgramSet(spec, { runtime, probes: new FeatureProbes(runtime), objectBytes: embeddedObject, ringbufSizeBytes: 1 << 20, useRingbuf: true });
    if (!out.ok) throw out.error;
    try {
      const red = new RedMaps(out.set.object, [10]);
      agent.next();
      expect(await agent.line()).toBe("receiver");
      for (const [host, port, answer] of [["127.0.0.1", workload.port!, "workload"], ["127.0.0.2", samePort.port!, "same port"]] as const) {
        const other = client(host, port, shared, "/work");
        expect(Number(await other.line())).toBe(shared);
        other.next();
        expect(await other.line()).toBe(answer);
        expect(await other.end()).toBe(0);
      }
      expect(await agent.end()).toBe(0);
      const served = red
        .take()
        .entries.filter((e) => e.key.pid === process.pid && e.key.role === Role.SERVER)
        .map((e) => `${e.key.peerPort} ${e.key.method} ${e.key.status} ${e.count}`)
        .sort();
      // The server side's key holds its own port: the 127.0.0.2 server's is the agent's remote port.
      expect(served).toEqual([`${workload.port} GET 200 1`, `${exporterSide.port} GET 200 1`].sort());
    } finally {
      await exporterSide.stop(true);
      await workload.stop(true);
      await samePort.stop(true);
      const ids = out.set.programs.map((p) => p.id).filter((id) => id > 0);
      out.set.close();
      await expectReleased(ids);
    }
  }, 60_000);
});
