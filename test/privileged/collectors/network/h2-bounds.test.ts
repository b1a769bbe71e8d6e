/**
 * Privileged: the bounds of HTTP/2 forwarding on the real kernel. With http2_records_per_second at 20, h2load's
 * 3000 requests on one h2c connection to a Node server stop being forwarded after the first records: the kernel
 * stops the connection (both sockets, each saying so with a header-only record) and the agent counts the stopped
 * directions as rate_limit drops, so far fewer than 3000 server spans arrive. Then, with the limit out of the way,
 * a raw client (test/fixtures/h2-raw-client.py) writes a 14 KB header block in one call: forwarded whole as 4 KiB
 * records, it is a client span; a 40 KB one is over what the kernel forwards of one call (32 KiB): that direction
 * is counted as http2_state_lost and gives no span.
 * Every process on the host is traced, so other work's HTTP/2 traffic may add to the drops: counts are lower bounds.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { startPortServer, type PortServer } from "../../../helpers/ports";
import { NODE_H2_SERVER, spansDropped, startTracingAgent, until, type TracingAgent } from "./harness";

const REPO = new URL("../../../../", import.meta.url).pathname;

setDefaultTimeout(90_000);


const ebpf = (records: number) => `    network:
      enabled: true
      max_spans_per_second: 1000000
      http2_records_per_second: ${records}
      metrics_interval: 1s`;

describe("HTTP/2 forwarding bounds on the real kernel", () => {
  let t: TracingAgent;
  let server: PortServer;
  let port = 0;

  beforeAll(async () => {
    t = await startTracingAgent(ebpf(20));
    await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
    server = await startPortServer(["node", "-e", NODE_H2_SERVER]);
    port = server.port;
  });

  afterAll(async () => {
    await server?.stop();
    await t?.stop();
  });

  const dropped = (reason: string) => spansDropped(t, reason);
  /** Waits (the stats poll runs every second) until drops of `reason` reach `before + n`; returns the increase. */
  const dropsReach = async (reason: string, before: number, n: number) => {
    const end = Date.now() + 15_000;
    let seen = 0;
    while (Date.now() < end && (seen = (await dropped(reason)) - before) < n) await Bun.sleep(100);
    return seen;
  };
  const serverSpans = () => t.collected.spans.filter((s) => s.attributes["process.pid"] === server.pid && s.kind === "SPAN_KIND_SERVER" && !s.name.startsWith("CONNECT"));

  test("over http2_records_per_second a connection is no longer forwarded: its directions count as rate_limit drops", async () => {
    const before = await dropped("rate_limit");
    const h2load = Bun.spawn(["h2load", "-n", "3000", "-c", "1", "-m", "10", `http://127.0.0.1:${port}/limited`], { stdout: "pipe", stderr: "inherit" });
    const out = await new Response(h2load.stdout).text();
    expect(await h2load.exited).toBe(0);
    expect(out).toMatch(/3000 succeeded/);
    /* Both sockets of the connection (h2load's and the server's) were stopped: two directions each. */
    expect(await dropsReach("rate_limit", before, 4)).toBeGreaterThanOrEqual(4);
    expect(serverSpans().length).toBeLessThan(3000);
  });

  test("a call up to 32 KiB is forwarded whole in 4 KiB records; a longer one is cut and its direction counted as http2_state_lost", async () => {
    /* A new window of the limit for the calls below. */
    await t.reconfigure(ebpf(1_000_000));
    await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok after reload", 30_000);
    const before = await dropped("http2_state_lost");
    /* The client writes everything (preface, SETTINGS, the header block) in one call. */
    const client = async (path: string, octets: number) => {
      const p = Bun.spawn(["/usr/bin/python3", `${REPO}test/fixtures/h2-raw-client.py`, String(port), path, String(octets)], { stdout: "pipe", stderr: "inherit" });
      const sent = Number((await new Response(p.stdout).text()).trim());
      expect(await p.exited).toBe(0);
      return { pid: p.pid, sent };
    };
    const big = await client("/big", 14_000);
    expect(big.sent).toBeGreaterThan(3 * 4096);
    const clientSpans = (pid: number) => t.collected.spans.filter((s) => s.attributes["process.pid"] === pid && s.kind === "SPAN_KIND_CLIENT" && !s.name.startsWith("CONNECT"));
    await until(() => clientSpans(big.pid).length === 1 && serverSpans().some((s) => s.attributes["url.path"] === "/big"), "the /big client and server spans");
    expect(clientSpans(big.pid).map((s) => [s.attributes["url.path"], s.attributes["http.response.status_code"]])).toEqual([["/big", 200]]);
    /* Over 32 KiB in one write: the client's write direction cannot be decoded (the server may read it in parts). */
    const huge = await client("/huge", 40_000);
    expect(huge.sent).toBeGreaterThan(8 * 4096);
    expect(await dropsReach("http2_state_lost", before, 1)).toBeGreaterThanOrEqual(1);
    await Bun.sleep(500);
    expect(clientSpans(huge.pid)).toEqual([]);
  });
});
