/**
 * Privileged: the bound on HTTP/2 over TLS on the real kernel. With http2_records_per_second at 20, h2load's 3000
 * requests on one h2 connection (ALPN) to nghttpd, both on libssl.so.3, stop being forwarded after the first calls:
 * the kernel stops each SSL connection (nghttpd's and h2load's, each saying so with a header-only record) and the
 * agent counts their directions as rate_limit drops, so far fewer than 3000 server spans arrive, and the TLS ring
 * loses nothing. Every process on the host is traced, so other work's traffic may add to the drops: counts are
 * lower bounds, except the ring's losses.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { spansDropped, startTracingAgent, until, type TracingAgent } from "../network/harness";
import { startNghttpd, type NghttpdServer } from "./harness";
import { attachedTarget } from "./library-case";

setDefaultTimeout(90_000);

const isRoot = process.getuid?.() === 0;
const missing = ["nghttpd", "h2load", "curl", "openssl"].filter((b) => !Bun.which(b));

describe.skipIf(!isRoot || missing.length > 0)(`HTTP/2 over TLS: the call bound${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  let t: TracingAgent;
  let server: NghttpdServer;
  let port = 0;

  beforeAll(async () => {
    t = await startTracingAgent(`    network:
      enabled: true
      tls: true
      max_spans_per_second: 1000000
      http2_records_per_second: 20
      metrics_interval: 1s`);
    await until(() => t.agent.agent.status.component("ebpf/tls")?.state === "ok", "ebpf/tls ok", 30_000);
    server = await startNghttpd({ hello: "hello\n" });
    port = server.port;
    /* libssl is probed once the agent has seen it mapped (scans 150 ms, 1.5 s and 5 s after an exec): its attach
     * state in /status/ebpf says when. */
    await attachedTarget(t, server.pid, (path) => /\/libssl\.so\.3$/.test(path));
  }, 90_000);

  afterAll(async () => {
    await server?.stop();
    await t?.stop();
  });

  const ringLost = async () => {
    const text = await (await t.agent.request("/metrics")).text();
    return Number(text.split("\n").find((l) => l.startsWith('svc_ebpf_ringbuf_lost_total{ringbuf="tls/tls_events"}'))?.split(" ").at(-1) ?? NaN);
  };

  test("over http2_records_per_second an SSL connection is no longer forwarded: its directions count as rate_limit drops, nothing is lost in the ring", async () => {
    const before = await spansDropped(t, "rate_limit");
    const lostBefore = await ringLost();
    expect(lostBefore).toBe(0);
    const h2load = Bun.spawn(["h2load", "-n", "3000", "-c", "1", "-m", "10", `https://127.0.0.1:${port}/hello`], { stdout: "pipe", stderr: "inherit" });
    const out = await new Response(h2load.stdout).text();
    expect(await h2load.exited).toBe(0);
    expect(out).toMatch(/3000 succeeded/);
    /* Both SSL connections (h2load's and nghttpd's) were stopped: two directions each. */
    let seen = 0;
    const end = Date.now() + 15_000;
    while (Date.now() < end && (seen = (await spansDropped(t, "rate_limit")) - before) < 4) await Bun.sleep(100);
    expect(seen).toBeGreaterThanOrEqual(4);
    const serverSpans = t.collected.spans.filter((s) => s.attributes["process.pid"] === server.pid && s.kind === "SPAN_KIND_SERVER" && s.attributes["url.path"] === "/hello");
    expect(serverSpans.length).toBeLessThan(3000);
    expect(await ringLost()).toBe(0);
  });
});
