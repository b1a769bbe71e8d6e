/**
 * Privileged e2e: an HTTP/1.1 exchange answered by 101 Switching Protocols ends at the 101. A server and its clients
 * in one Python process (test/fixtures/upgrade-http.py) upgrade three connections to WebSocket at once, exchange
 * frames from 0.6 s after the 101 on (the server's first), and send one plain GET. With max_spans_per_second 1 some of
 * the upgrades are captured (their records forwarded from the 101 on) and some only counted in the kernel. The
 * metric points as protoc decodes them (the official protos) hold, on each side, 3 exchanges with status 101 whose
 * durations add up to the milliseconds they took, not to the frames' later times, 1 with 200, and nothing else:
 * the frames after the upgrade are neither a new exchange nor part of the old one.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { resolve } from "node:path";
import { decodePointsWithProtoc, startPeerFixture, startTracingAgent, totalOf, until, type DecodedPoint, type TracingAgent } from "./harness";

const isRoot = process.getuid?.() === 0;
const UPGRADE = resolve(import.meta.dir, "../../../fixtures/upgrade-http.py");
const UPGRADES = 3;
/** What the fixture's frames come after the 101 at the earliest (DELAY there): any part of it in a duration is wrong. */
const DELAY_S = 0.6;

describe.skipIf(!isRoot)("network: connections upgraded by 101 Switching Protocols", () => {
  let t: TracingAgent;
  beforeAll(async () => {
    t = await startTracingAgent(`    network:
      enabled: true
      metrics_interval: 1h
      max_spans_per_second: 1`);
    await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
  }, 60_000);
  afterAll(async () => {
    await t?.stop();
  });

  test("each side counts 3 exchanges with 101 that end at the 101, 1 with 200, and nothing for the frames after", async () => {
    const py = await startPeerFixture(["python3", UPGRADE]);
    const port = py.port;
    py.go();
    expect(await py.exited).toBe(0);
    expect((await py.rest()).trim()).toBe("done");
    expect((await t.agent.request("/admin/flush", { method: "POST" })).status).toBe(200);
    const side = (metric: string) => (a: Record<string, string | number | boolean>) => a["server.port"] === port && (metric.includes("client") || String(a["http.route"]).startsWith("/"));
    const METRICS = ["http.server.request.duration", "http.client.request.duration"];
    await until(() => METRICS.every((m) => t.collected.total(m, side(m)) >= UPGRADES + 1), "both sides' RED counts", 10_000);
    const points = decodePointsWithProtoc(t.collected.metricBodies);
    const of = (metric: string, status: number) => points.filter((p: DecodedPoint) => p.metric === metric && side(metric)(p.attributes) && p.attributes["http.response.status_code"] === status);
    for (const metric of METRICS) {
      const upgraded = of(metric, 101);
      expect([metric, upgraded.reduce((n, p) => n + p.count, 0)]).toEqual([metric, UPGRADES]);
      // Three exchanges of milliseconds each; one ended at a frame would add DELAY_S or more.
      const seconds = upgraded.reduce((n, p) => n + p.sum, 0);
      expect([metric, seconds < DELAY_S / 2]).toEqual([metric, true]);
      expect([metric, of(metric, 200).reduce((n, p) => n + p.count, 0)]).toEqual([metric, 1]);
      // Nothing else on this port: no exchange made of frames, none closed unanswered.
      expect([metric, totalOf(points, metric, side(metric))]).toEqual([metric, UPGRADES + 1]);
    }
  }, 60_000);
});
