/**
 * Privileged: an HTTP/2 connection whose forwarding lost bytes is decoded again from a later call. A Node `http2`
 * client makes requests on its one connection to a Node server in two phases; the second, after 1.5 s of quiet, is
 * ten GETs of /slow/<n> 400 ms apart, which must be ten server and ten client spans, count exactly ten in the
 * server's RED metrics under /slow/{id}, and as many in the client's as in the server's:
 * - a stop: with http2_records_per_second at 20, forty GETs one after another go over the budget and the kernel
 *   stops both sockets of the connection; in the next window (the ring empty) it resumes each at its first call that
 *   starts with frames (svc_ebpf_http2_resumed_total), and user space decodes the connection anew from there, as one
 *   found in its middle;
 * - a cut: with the budget out of the way, 200 concurrent GETs make writev calls of more than the 4 KiB the kernel
 *   forwards of one, so a header block is lost and a direction cannot be decoded on; the kernel marks the next call
 *   that starts with frames, and user space decodes the connection anew from there.
 * Before, such a connection was never decoded again. Both capture modes.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { startPortServer, type PortServer } from "../../../helpers/ports";
import { firstLine } from "../../../helpers/wait";
import { NODE_H2_SERVER, startTracingAgent, until, type TracingAgent } from "./harness";

setDefaultTimeout(90_000);

const REPO = new URL("../../../../", import.meta.url).pathname;

/**
 * One connection: a GET of /warm, then "open"; on a line of stdin, the first phase (argv[2]: "sequential", forty GETs
 * one after another; "burst", 200 concurrent ones), 1.5 s of quiet, then ten GETs 400 ms apart; then "done".
 */
const CLIENT = `
const http2 = require("node:http2");
const s = http2.connect(process.argv[1]);
const get = (p) => new Promise((res, rej) => {
  const r = s.request({ ":path": p });
  r.on("response", (h) => { r.resume(); r.on("end", () => res(h[":status"])); });
  r.on("error", rej);
  r.end();
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
(async () => {
  await get("/warm");
  console.log("open");
  process.stdin.once("data", async () => {
    if (process.argv[2] === "burst") await Promise.all(Array.from({ length: 200 }, (_, i) => get("/burst/" + i)));
    else for (let i = 0; i < 40; i++) await get("/fast/" + i);
    await sleep(1500);
    for (let i = 0; i < 10; i++) { await get("/slow/" + i); await sleep(400); }
    console.log("done");
    s.close();
  });
})();
`;

const cases = [
  { mode: "socket", phase: "sequential", records: 20 },
  { mode: "syscalls", phase: "sequential", records: 20 },
  { mode: "socket", phase: "burst", records: 1_000_000 },
  { mode: "syscalls", phase: "burst", records: 1_000_000 },
] as const;

for (const { mode, phase, records } of cases)
  describe(`an HTTP/2 connection decoded again after its forwarding lost bytes (http_capture ${mode}, first phase ${phase})`, () => {
    let t: TracingAgent;
    let server: PortServer;
    let client: Bun.Subprocess<"pipe", "pipe", "inherit">;

    beforeAll(async () => {
      t = await startTracingAgent(`    network:
      enabled: true
      http_capture: ${mode}
      max_spans_per_second: 1000000
      http2_records_per_second: ${records}
      metrics_interval: 1s`);
      await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
      server = await startPortServer(["node", "-e", NODE_H2_SERVER]);
    });

    afterAll(async () => {
      client?.kill();
      await client?.exited;
      await server?.stop();
      await t?.stop();
    });

    test("the requests of the second phase are spans and RED counts on both sides, exactly", async () => {
      client = Bun.spawn(["node", "-e", CLIENT, `http://127.0.0.1:${server.port}`, phase], { cwd: REPO, stdin: "pipe", stdout: "pipe", stderr: "inherit" });
      expect(await firstLine(client.stdout)).toBe("open");
      client.stdin.write("go\n");
      client.stdin.flush();
      expect(await firstLine(client.stdout)).toBe("done");
      const slow = (kind: string, pid: number) =>
        t.collected.spans
          .filter((s) => s.kind === kind && s.attributes["process.pid"] === pid && String(s.attributes["url.path"]).startsWith("/slow/"))
          .map((s) => `${s.attributes["url.path"]} ${s.attributes["http.response.status_code"]}`)
          .sort();
      /* The server's series have routes; the client's none: all of the connection's count, as many as the server's. */
      const all = (metric: string) => t.collected.total(metric, (a) => a["server.port"] === server.port);
      const slowCounted = () => t.collected.total("http.server.request.duration", (a) => a["server.port"] === server.port && a["http.route"] === "/slow/{id}");
      const expected = Array.from({ length: 10 }, (_, i) => `/slow/${i} 200`).sort();
      await until(() => slow("SPAN_KIND_SERVER", server.pid).length >= 10 && slow("SPAN_KIND_CLIENT", client.pid).length >= 10, "ten /slow server and client spans", 20_000);
      await until(() => slowCounted() >= 10 && all("http.client.request.duration") >= all("http.server.request.duration"), "the /slow RED counts on each side", 20_000);
      /* A second more: nothing else arrives (each request once). */
      await Bun.sleep(1500);
      expect(slow("SPAN_KIND_SERVER", server.pid)).toEqual(expected);
      expect(slow("SPAN_KIND_CLIENT", client.pid)).toEqual(expected);
      expect([slowCounted(), all("http.client.request.duration")]).toEqual([10, all("http.server.request.duration")]);
      /* Over the budget both sockets stopped, and resumed; else the kernel cut a call and marked the next one. */
      const metrics = (await (await t.agent.request("/metrics")).text()).split("\n");
      const resumed = Number(metrics.find((l) => l.startsWith("svc_ebpf_http2_resumed_total "))?.split(" ")[1] ?? 0);
      if (phase === "sequential") expect(resumed).toBeGreaterThanOrEqual(2);
      else expect(resumed).toBe(0);
    });
  });
