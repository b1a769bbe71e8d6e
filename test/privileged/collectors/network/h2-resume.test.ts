/**
 * Privileged: an HTTP/2 connection whose forwarding lost bytes is decoded again from a later call. A Node `http2`
 * client makes requests on its one connection to a Node server in two phases; the second, after 1.5 s of quiet, is
 * ten GETs of /slow/<n> 500 ms apart (answered 404, the only ones), which must be ten server and ten client spans
 * and count exactly ten in the RED metrics of each side (the server's under /slow/{id}):
 * - a stop: with http2_records_per_second at 40, forty GETs one after another go over the budget and the kernel
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
import { RESUME_H2_CLIENT, expectSecondPhase, startTracingAgent, until, type TracingAgent } from "./harness";

setDefaultTimeout(90_000);

const REPO = new URL("../../../../", import.meta.url).pathname;

/** A Node HTTP/2 cleartext server answering 404 to /slow/<n> (the second phase), 200 to anything else; prints its port. */
const SERVER = `
const http2 = require("node:http2");
const s = http2.createServer();
s.on("stream", (stream, headers) => {
  stream.respond({ ":status": headers[":path"].startsWith("/slow/") ? 404 : 200, "content-type": "text/plain" });
  stream.end("hello");
});
s.listen(0, "127.0.0.1", () => console.log(s.address().port));
`;

const cases = [
  { mode: "socket", phase: "sequential", records: 40 },
  { mode: "syscalls", phase: "sequential", records: 40 },
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
      server = await startPortServer(["node", "-e", SERVER]);
    });

    afterAll(async () => {
      client?.kill();
      await client?.exited;
      await server?.stop();
      await t?.stop();
    });

    test("the requests of the second phase are spans and RED counts on both sides, exactly", async () => {
      client = Bun.spawn(["node", "-e", RESUME_H2_CLIENT, `http://127.0.0.1:${server.port}`, phase], { cwd: REPO, stdin: "pipe", stdout: "pipe", stderr: "inherit" });
      expect(await firstLine(client.stdout)).toBe("open");
      const resumed = await expectSecondPhase(t, client, server.pid, server.port, "http");
      expect(t.collected.total("http.server.request.duration", (a) => a["server.port"] === server.port && a["http.route"] === "/slow/{id}")).toBe(10);
      /* Over the budget both sockets stopped, and resumed; else the kernel cut a call and marked the next one. */
      if (phase === "sequential") expect(resumed).toBeGreaterThanOrEqual(2);
      else expect(resumed).toBe(0);
    });
  });
