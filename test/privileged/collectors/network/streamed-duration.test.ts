/**
 * Privileged e2e: the RED duration of a response that outlasts the kernel's one-second generations. A chunked
 * response of 10 chunks 0.25 s apart (test/fixtures/streamed-http.py: server and client in one Python process, in
 * cleartext and over TLS) lasts at least 2.25 s; the kernel counts the exchange at its status line and lengthens its duration at each later call of
 * the response, also after its generation was taken (red_moves). After a flush, the points as protoc decodes them
 * (the official protos) hold one exchange per side whose duration is at least 2.25 s. A second stream, of 5 s, is cut
 * by a flush 1.5 s in: that export holds the exchange with the duration known then, and the growth after it is
 * dropped, not exported as a point of its own: the next flush holds nothing for it.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join, resolve } from "node:path";
import { rmSync } from "node:fs";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";
import { decodePointsWithProtoc, startPeerFixture, startTracingAgent, until, type DecodedPoint, type TracingAgent } from "./harness";

const isRoot = process.getuid?.() === 0;
const STREAMED = resolve(import.meta.dir, "../../../fixtures/streamed-http.py");
const METRICS = ["http.server.request.duration", "http.client.request.duration"];

/** Starts the fixture (over TLS with `tls`) and its client. */
async function stream(chunks: number, gap: number, tls?: SelfSignedCert) {
  const py = await startPeerFixture(["python3", STREAMED, String(chunks), String(gap), ...(tls ? [tls.certPath, join(tls.dir, "key.pem")] : [])]);
  py.go();
  return py;
}

describe.skipIf(!isRoot)("network: RED durations of responses longer than a generation", () => {
  let t: TracingAgent;
  beforeAll(async () => {
    t = await startTracingAgent(`    network:
      enabled: true
      metrics_interval: 1h`);
    await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
  }, 60_000);
  afterAll(async () => {
    await t?.stop();
  });

  const of = (points: DecodedPoint[], metric: string, port: number) => points.filter((p) => p.metric === metric && p.attributes["server.port"] === port && p.attributes["http.response.status_code"] === 200);
  const flush = async () => expect((await t.agent.request("/admin/flush", { method: "POST" })).status).toBe(200);

  test.each([
    ["cleartext", false],
    ["over TLS (the plaintext of the libssl probes)", true],
  ])("a 2.25 s stream counts once per side with its whole duration (%s)", async (_name, tls) => {
    const cert = tls ? makeSelfSignedCert() : undefined;
    // The fixture read its certificate before it printed its port.
    const s = await stream(10, 0.25, cert);
    if (cert) rmSync(cert.dir, { recursive: true, force: true });
    expect(await s.next()).toBe("started");
    expect(await s.next()).toBe("done");
    expect(await s.exited).toBe(0);
    await flush();
    await until(() => METRICS.every((m) => t.collected.total(m, (a) => a["server.port"] === s.port) >= 1), "both sides' RED counts", 10_000);
    const points = decodePointsWithProtoc(t.collected.metricBodies);
    for (const metric of METRICS) {
      const found = of(points, metric, s.port);
      expect([metric, found.reduce((n, p) => n + p.count, 0)]).toEqual([metric, 1]);
      expect([metric, found[0]!.attributes["url.scheme"]]).toEqual([metric, tls ? "https" : undefined]);
      // Nine gaps of 0.25 s lie between the first chunk and the last: the duration cannot be shorter.
      const seconds = found.reduce((n, p) => n + p.sum, 0);
      expect([metric, seconds >= 2.25]).toEqual([metric, true]);
      // Its bucket agrees with its sum: the count sits in no bucket below 2.25 s.
    }
  }, 60_000);

  test("a stream cut by an export: the export holds what was known then, the rest is not exported later", async () => {
    const s = await stream(21, 0.25);
    expect(await s.next()).toBe("started");
    await Bun.sleep(1500);
    const before = t.collected.metricBodies.length;
    await flush();
    await until(() => METRICS.every((m) => t.collected.total(m, (a) => a["server.port"] === s.port) >= 1), "both sides' RED counts", 10_000);
    const first = decodePointsWithProtoc(t.collected.metricBodies.slice(before));
    expect(await s.next()).toBe("done");
    expect(await s.exited).toBe(0);
    const between = t.collected.metricBodies.length;
    await flush();
    await Bun.sleep(500);
    const second = decodePointsWithProtoc(t.collected.metricBodies.slice(between));
    for (const metric of METRICS) {
      const found = of(first, metric, s.port);
      expect([metric, found.reduce((n, p) => n + p.count, 0)]).toEqual([metric, 1]);
      // Exported 1.5 s into a stream of at least 5 s.
      expect([metric, found.reduce((n, p) => n + p.sum, 0) < 4.75]).toEqual([metric, true]);
      expect([metric, of(second, metric, s.port)]).toEqual([metric, []]);
    }
  }, 60_000);
});
