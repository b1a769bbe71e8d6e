/**
 * Privileged e2e: a reload that changes only the kernel's limits (max_spans_per_second, http2_records_per_second)
 * under load. The network set keeps running (the same kernel programs before and after, by their ids in
 * /status/ebpf) with the new limits set in place: h2load's requests, sent while the reload happens, are all counted
 * in the RED metrics on both sides (a new set would miss everything sent while it loads: about three quarters of a
 * second of this load), and the kernel captures spans at the new rate, far beyond what the old cap lets through.
 * A reload that changes a key the set is built with (max_connections) makes a new set, verified while the old one
 * still runs and attached as soon as it stopped: of the requests sent across it, those missed are the few of the
 * switch (0.2-0.6% of this load here), not those of the whole load (21% when the new set was loaded only after the
 * old one stopped). A new agent.ebpf.ringbuf_size replaces the set the same way (0.5-1.2% missed here, 30-40% when
 * each set stopped before it loaded again).
 * The tests wait on the in-process receiver's decoding and assert on protoc's (`protoc --decode` against the official
 * protos) of what the agent exported.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { startPortServer, type PortServer } from "../../../helpers/ports";
import { decodePointsWithProtoc, decodeSpansWithProtoc, startTracingAgent, totalOf, until, type TracingAgent } from "./harness";

const isRoot = process.getuid?.() === 0;
const hasH2load = Bun.which("h2load") !== null;
const SERVER = `const s = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("ok") }); console.log(s.port);`;
const OLD_CAP = 20;
const NEW_CAP = 5000;
const REQUESTS = 200_000;

const network = (cap: number, h2: number, maxConnections = 65_536) => `    network:
      enabled: true
      http: true
      metrics_interval: 1h
      max_spans_per_second: ${cap}
      http2_records_per_second: ${h2}
      max_connections: ${maxConnections}`;

/** Kernel ids of the network set's attached programs, from GET /status/ebpf. */
async function networkProgramIds(t: TracingAgent): Promise<number[]> {
  const view = (await (await t.agent.request("/status/ebpf")).json()) as { programs: Array<{ name: string; id: number; attached: boolean }> };
  return view.programs.filter((p) => p.attached && /length|set_state/.test(p.name) && !p.name.startsWith("tls_")).map((p) => p.id).sort((a, b) => a - b);
}

/** The counts of `metric` for the server at `port` in what the agent exported so far, as protoc decodes it. */
function exported(t: TracingAgent, metric: string, port: number): number {
  return totalOf(decodePointsWithProtoc(t.collected.metricBodies), metric, (a) => a["server.port"] === port);
}

describe.skipIf(!isRoot || !hasH2load)("ebpf/network limits changed by a reload under load", () => {
  let t: TracingAgent | undefined;
  let server: PortServer | undefined;
  afterAll(async () => {
    await server?.stop();
    await t?.stop();
  });

  test("the set keeps running: every request counted on both sides, spans at the new cap", async () => {
    t = await startTracingAgent(network(OLD_CAP, 1000));
    await until(() => t!.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
    server = await startPortServer([process.execPath, "-e", SERVER]);
    const before = await networkProgramIds(t);
    expect(before.length).toBeGreaterThan(0);

    const load = Bun.spawn(["h2load", "--h1", "-m", "1", "-c", "8", "-n", String(REQUESTS), `http://127.0.0.1:${server.port}/r`], { stdout: "pipe", stderr: "pipe" });
    await Bun.sleep(700);
    const outcome = (await t.reconfigure(network(NEW_CAP, 20_000))) as { ok: boolean };
    expect(outcome.ok).toBe(true);
    // The reload came while h2load ran: otherwise this test proves nothing.
    expect(load.exitCode).toBeNull();
    const out = await new Response(load.stdout).text();
    expect(await load.exited).toBe(0);
    const done = Number(/requests: \d+ total, \d+ started, (\d+) done/.exec(out)?.[1]);
    expect(done).toBe(REQUESTS);
    expect(await networkProgramIds(t)).toEqual(before);

    const port = server.port;
    const count = (metric: string) => t!.collected.total(metric, (a) => a["server.port"] === port);
    await until(
      () => {
        void t!.agent.request("/admin/flush", { method: "POST" });
        return count("http.server.request.duration") >= REQUESTS && count("http.client.request.duration") >= REQUESTS;
      },
      "every request counted",
      20_000,
    );
    await Bun.sleep(300);
    expect(exported(t, "http.server.request.duration", port)).toBe(REQUESTS);
    expect(exported(t, "http.client.request.duration", port)).toBe(REQUESTS);
    // At the old cap the whole run could give at most a few dozen spans; the kernel captures at the new one.
    const spans = decodeSpansWithProtoc(t.collected.traceBodies).filter((s) => s.attributes["server.port"] === port).length;
    expect(spans).toBeGreaterThan(OLD_CAP * 20);
  }, 120_000);

  /**
   * h2load's REQUESTS sent across a reload to `ebpfYaml`, which replaces the network set: the new programs (other
   * kernel ids) run afterwards, and each side's count of this run is returned as protoc decodes the exports.
   */
  async function countedAcrossReplacement(ebpfYaml: string): Promise<number[]> {
    expect(t).toBeDefined();
    expect(server).toBeDefined();
    const port = server!.port;
    const count = (metric: string) => t!.collected.total(metric, (a) => a["server.port"] === port);
    const counted = { server: exported(t!, "http.server.request.duration", port), client: exported(t!, "http.client.request.duration", port) };
    const before = await networkProgramIds(t!);
    const load = Bun.spawn(["h2load", "--h1", "-m", "1", "-c", "8", "-n", String(REQUESTS), `http://127.0.0.1:${port}/r`], { stdout: "pipe", stderr: "pipe" });
    await Bun.sleep(700);
    const outcome = (await t!.reconfigure(ebpfYaml)) as { ok: boolean };
    expect(outcome.ok).toBe(true);
    expect(load.exitCode).toBeNull();
    const out = await new Response(load.stdout).text();
    expect(await load.exited).toBe(0);
    expect(Number(/requests: \d+ total, \d+ started, (\d+) done/.exec(out)?.[1])).toBe(REQUESTS);
    await until(() => t!.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok after the reload", 30_000);
    const after = await networkProgramIds(t!);
    expect(after.length).toBe(before.length);
    expect(after.some((id) => before.includes(id))).toBe(false);
    // Counts of this run: what arrives after a few flushes, on each side.
    let last = -1;
    for (let i = 0; i < 20 && count("http.server.request.duration") !== last; i++) {
      last = count("http.server.request.duration");
      await t!.agent.request("/admin/flush", { method: "POST" });
      await Bun.sleep(500);
    }
    return [exported(t!, "http.server.request.duration", port) - counted.server, exported(t!, "http.client.request.duration", port) - counted.client];
  }

  test("a reload that needs a new set: loaded while the old one runs, only the switch's requests missed", async () => {
    for (const n of await countedAcrossReplacement(network(NEW_CAP, 20_000, 4096))) {
      expect(n).toBeLessThanOrEqual(REQUESTS);
      expect(n).toBeGreaterThan(REQUESTS * 0.9);
    }
  }, 120_000);

  test("a new agent.ebpf.ringbuf_size: the set with its new rings loaded while the old one runs, as above", async () => {
    for (const n of await countedAcrossReplacement(`    ringbuf_size: 4MiB\n${network(NEW_CAP, 20_000, 4096)}`)) {
      expect(n).toBeLessThanOrEqual(REQUESTS);
      expect(n).toBeGreaterThan(REQUESTS * 0.9);
    }
    // Every ring of every set running (network, tls) has the new size.
    const view = (await (await t!.agent.request("/status/ebpf")).json()) as { maps: Array<{ name: string; type: string; max_entries: number }> };
    const rings = view.maps.filter((m) => m.type === "ringbuf");
    expect(rings.map((m) => m.name)).toContain("network/http_events");
    for (const m of rings) expect([m.name, m.max_entries]).toEqual([m.name, 4 * 1024 * 1024]);
  }, 120_000);
});
