/**
 * Privileged: an HTTP/2 over TLS connection opened before the agent, through the TLS uprobes. A Node `http2` client
 * (node's OpenSSL, linked statically with its symbols) opens one h2 connection to nghttpd (libssl.so.3) and makes 5
 * requests over it; only then does the agent start and probe both, and the same connection carries 20 requests to
 * distinct /late/<n> paths, 10 to /missing (404) and 5 more to /early. The kernel finds HTTP/2 frames in the
 * plaintext of an SSL object first seen in its middle and forwards it; user space decodes it with partial HPACK
 * tables. The RED metrics at the receiver count exactly the 35 requests made after the start on both sides, per
 * status and route, with url.scheme https, and svc_ebpf_http2_midstream_total counts both SSL objects. Without the
 * kernel's part nothing of the connection is counted.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { realpathSync } from "node:fs";
import { firstLine } from "../../../helpers/wait";
import { LONG_LIVED_H2_CLIENT, until, type TracingAgent } from "../network/harness";
import { startNghttpd, type NghttpdServer } from "./harness";
import { attachedTarget, startTlsTracingAgent } from "./library-case";

setDefaultTimeout(90_000);

const NODE = Bun.which("node");
const isRoot = process.getuid?.() === 0;
const missing = ["nghttpd", "curl", "openssl", "node"].filter((b) => !Bun.which(b));

describe.skipIf(!isRoot || missing.length > 0)(`an HTTP/2 over TLS connection opened before the agent${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  let t: TracingAgent | undefined;
  let server: NghttpdServer;
  let client: Bun.Subprocess<"pipe", "pipe", "inherit">;
  let counts: Record<string, number> = {};

  beforeAll(async () => {
    const files: Record<string, string> = { early: "early\n" };
    for (let i = 0; i < 20; i++) files[`late/${1000 + i}`] = `late ${i}\n`;
    server = await startNghttpd(files);
    client = Bun.spawn([NODE!, "-e", LONG_LIVED_H2_CLIENT, `https://127.0.0.1:${server.port}`], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
    expect(await firstLine(client.stdout)).toBe("open");
    /* The connection and its first five streams are behind it: now the agent starts and probes both ends. */
    t = await startTlsTracingAgent();
    await attachedTarget(t, server.pid, (path) => /\/libssl\.so\.3$/.test(path));
    await attachedTarget(t, client.pid, (path) => path === realpathSync(NODE!));
    client.stdin.write("go\n");
    client.stdin.flush();
    counts = JSON.parse(await firstLine(client.stdout));
  }, 120_000);

  afterAll(async () => {
    client?.stdin.end();
    client?.kill();
    await client?.exited;
    await server?.stop();
    await t?.stop();
  });

  test("the client made its 35 requests over the connection it opened before the agent", () => {
    expect(counts).toEqual({ "200": 25, "404": 10 });
  });

  test("RED metrics count the 35 requests made after the start exactly, on both sides, per status and route, as https", async () => {
    const c = t!.collected;
    const port = server.port;
    const server_ = (status: number, route?: string) =>
      c.total("http.server.request.duration", (a) => a["server.port"] === port && a["http.response.status_code"] === status && a["url.scheme"] === "https" && (route === undefined || a["http.route"] === route));
    const client_ = (status: number) => c.total("http.client.request.duration", (a) => a["server.port"] === port && a["http.response.status_code"] === status && a["url.scheme"] === "https");
    await until(() => server_(200) + server_(404) >= 35 && client_(200) + client_(404) >= 35, "35 server and 35 client requests counted", 20_000).catch((e: Error) => {
      throw new Error(`${e.message}: server 200 ${server_(200)}, 404 ${server_(404)}; client 200 ${client_(200)}, 404 ${client_(404)}`);
    });
    await Bun.sleep(2_500);
    expect([server_(200), server_(404), client_(200), client_(404)]).toEqual([25, 10, 25, 10]);
    expect(server_(200, "/late/{id}")).toBe(20);
    expect(server_(404, "/missing")).toBe(10);
    expect(server_(200, "/early")).toBe(5);
    /* Both SSL objects (the client's and the server's) were found in their middle, and /metrics says so. */
    const text = await (await t!.agent.request("/metrics")).text();
    expect(Number(text.split("\n").find((l) => l.startsWith("svc_ebpf_http2_midstream_total "))?.split(" ")[1])).toBeGreaterThanOrEqual(2);
  });
});
