/**
 * Privileged: an HTTP/2 over TLS connection the kernel stopped forwarding is forwarded again. A Node `http2` client
 * (node's OpenSSL, linked statically with its symbols) opens one h2 connection to nghttpd (libssl.so.3) and makes a
 * request; then the agent starts, with http2_records_per_second at 40, and probes both. Forty GETs one after another
 * go over the budget and the kernel stops both SSL connections; 1.5 s later (a new window, the ring empty) ten GETs
 * of /slow/<n> 500 ms apart (files nghttpd does not have: 404, the only ones) resume each at its first call that
 * starts with frames (svc_ebpf_http2_resumed_total), and user space decodes the connection anew from there. The ten
 * are server and client spans with url.scheme https and count exactly ten in the RED metrics of each side. Before,
 * a stopped SSL connection was never decoded again.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { realpathSync } from "node:fs";
import { firstLine } from "../../../helpers/wait";
import { RESUME_H2_CLIENT, expectSecondPhase, type TracingAgent } from "../network/harness";
import { startNghttpd, type NghttpdServer } from "./harness";
import { attachedTarget, startTlsTracingAgent } from "./library-case";

setDefaultTimeout(90_000);

const NODE = Bun.which("node");
const isRoot = process.getuid?.() === 0;
const missing = ["nghttpd", "openssl", "node"].filter((b) => !Bun.which(b));

describe.skipIf(!isRoot || missing.length > 0)(`an HTTP/2 over TLS connection stopped, then forwarded again${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  let t: TracingAgent | undefined;
  let server: NghttpdServer;
  let client: Bun.Subprocess<"pipe", "pipe", "inherit">;

  beforeAll(async () => {
    const files: Record<string, string> = { warm: "warm\n" };
    for (let i = 0; i < 40; i++) files[`fast/${i}`] = `fast ${i}\n`;
    server = await startNghttpd(files);
    client = Bun.spawn([NODE!, "-e", RESUME_H2_CLIENT, `https://127.0.0.1:${server.port}`, "sequential"], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
    expect(await firstLine(client.stdout)).toBe("open");
    t = await startTlsTracingAgent("\n      http2_records_per_second: 40");
    await attachedTarget(t, server.pid, (path) => /\/libssl\.so\.3$/.test(path));
    await attachedTarget(t, client.pid, (path) => path === realpathSync(NODE!));
  }, 120_000);

  afterAll(async () => {
    client?.kill();
    await client?.exited;
    await server?.stop();
    await t?.stop();
  });

  test("the requests after the stop are spans and RED counts on both sides, exactly, as https", async () => {
    expect(await expectSecondPhase(t!, client, server.pid, server.port, "https")).toBeGreaterThanOrEqual(2);
  });
});
