/**
 * Privileged e2e: what the network set sees but cannot account for reaches svc_ebpf_network_dropped_total, so that
 * counted and uncounted add up to what the peers did.
 * - red_replaced: a client (test/fixtures/pipelined-http.py, one process with its server thread) writes three
 *   pipelined requests, each in a write of its own 100 ms apart, before reading any response; its server reads each
 *   as it arrives (it reports how many of its reads started a request) and answers all three. Each side's RED metrics count one exchange (the last
 *   request started, answered by the first response) and the requests it replaced are counted as red_replaced: 1 + 2
 *   = 3 per side, the requests sent.
 * - conns_full: with max_connections at its minimum (1,024 entries, both ends of a loopback connection one each),
 *   700 connections held open at once (1,400 sockets) leave at least 376 sockets untracked, each counted at its
 *   connect or accept and again at each call that moves data.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { resolve } from "node:path";
import { startPeerFixture, startTracingAgent, until, type TracingAgent } from "./harness";

const isRoot = process.getuid?.() === 0;

const PIPELINED = resolve(import.meta.dir, "../../../fixtures/pipelined-http.py");

async function dropped(t: TracingAgent): Promise<Record<string, number>> {
  const text = await (await t.agent.request("/metrics")).text();
  const lines = text.split("\n").filter((l) => l.startsWith("svc_ebpf_network_dropped_total{"));
  return Object.fromEntries(lines.map((l) => [/reason="([a-z_]+)"/.exec(l)![1]!, Number(l.split(" ").at(-1))]));
}

describe.skipIf(!isRoot)("network: what the kernel could not account for", () => {
  let t: TracingAgent;
  beforeAll(async () => {
    t = await startTracingAgent(`    network:
      enabled: true
      max_connections: 1024
      metrics_interval: 1h
      max_spans_per_second: 50000`);
    await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
  }, 60_000);
  afterAll(async () => {
    await t?.stop();
  });

  test("pipelined requests replaced before their response: counted one exchange and two red_replaced per side", async () => {
    const before = await dropped(t);
    const py = await startPeerFixture(["python3", PIPELINED]);
    const port = py.port;
    py.go();
    expect(await py.exited).toBe(0);
    const serverStarts = Number((await py.rest()).trim());
    // The client's three writes are three request starts; the server's reads are three unless a busy host let two
    // requests arrive before it read (then one read carries both, seen as one start).
    expect(serverStarts).toBeGreaterThanOrEqual(1);
    const replaced = 2 + (serverStarts - 1);
    let after = before;
    for (let i = 0; i < 30 && (after.red_replaced ?? 0) - (before.red_replaced ?? 0) < replaced; i++) {
      await Bun.sleep(200);
      after = await dropped(t);
    }
    expect(after.red_replaced! - before.red_replaced!).toBe(replaced);
    expect((await t.agent.request("/admin/flush", { method: "POST" })).status).toBe(200);
    // The server's side under its route, the client's under the server's port (client points carry no route).
    const counted = (metric: string) => t.collected.total(metric, (a) => a["server.port"] === port && a["http.response.status_code"] === 200 && (metric.includes("client") || a["http.route"] === "/pipelined"));
    await until(() => counted("http.server.request.duration") >= 1 && counted("http.client.request.duration") >= 1, "both sides' RED counts", 10_000);
    expect([counted("http.server.request.duration"), counted("http.client.request.duration")]).toEqual([1, 1]);
  }, 30_000);

  test("connections over max_connections: their calls counted as conns_full", async () => {
    const before = (await dropped(t)).conns_full!;
    const accepted: Array<{ end(): void }> = [];
    const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { open: (sk) => void accepted.push(sk), data() {} } });
    // Opened in a child process: the test process is the agent's own, never traced.
    const N = 700;
    const child = Bun.spawn(["python3", "-c", `
import socket, sys, time
cs = [socket.create_connection(("127.0.0.1", ${server.port})) for _ in range(${N})]
for c in cs: c.send(b"x")
print("open", flush=True)
sys.stdin.readline()
`], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
    try {
      const reader = child.stdout.getReader();
      expect(new TextDecoder().decode((await reader.read()).value)).toContain("open");
      let now = before;
      for (let i = 0; i < 50 && now - before < 2 * N - 1024; i++) {
        await Bun.sleep(200);
        now = (await dropped(t)).conns_full!;
      }
      expect(now - before).toBeGreaterThanOrEqual(2 * N - 1024);
    } finally {
      child.stdin.write("\n");
      child.stdin.end();
      await child.exited;
      for (const sk of accepted) sk.end();
      server.stop(true);
    }
  }, 30_000);
});
