/**
 * Privileged: the kernel's per-second exchange budget (agent.ebpf.network.max_spans_per_second) on the real
 * kernel. A burst of keep-alive requests far over the cap: at most the cap is captured per window, every exchange
 * not captured is counted as a rate_limit drop, and a burst after the window ended is captured again (the window's
 * clock moves: the programs read it as of the current jiffy).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { startLoopbackHttpServer, startTracingAgent, until, type DecodedSpan, type TracingAgent } from "./harness";

const CAP = 20;
const REQUESTS = 150;

setDefaultTimeout(60_000);

let t: TracingAgent;
let server: Awaited<ReturnType<typeof startLoopbackHttpServer>>;
let base = "";

async function rateLimitDrops(): Promise<number> {
  const text = await (await t.agent.request("/metrics")).text();
  const line = text.split("\n").find((l) => l.startsWith('svc_spans_dropped_total{reason="rate_limit"}'));
  return line ? Number(line.split(" ").at(-1)) : 0;
}

/** One curl, one keep-alive connection, REQUESTS GETs of `${prefix}/<i>`; resolves with its pid and how long it took. */
async function burst(prefix: string): Promise<{ pid: number; ms: number }> {
  const urls = Array.from({ length: REQUESTS }, (_, i) => `${base}${prefix}/${i}`);
  const started = performance.now();
  const curl = Bun.spawn(["curl", "-s", "--http1.1", ...urls.flatMap((u) => ["-o", "/dev/null", u])], { stdout: "ignore", stderr: "inherit" });
  expect(await curl.exited).toBe(0);
  return { pid: curl.pid, ms: performance.now() - started };
}

const httpSpansUnder = (prefix: string) => (s: DecodedSpan) => String(s.attributes["url.path"] ?? "").startsWith(prefix + "/");

beforeAll(async () => {
  t = await startTracingAgent(`    network:
      enabled: true
      max_spans_per_second: ${CAP}`);
  await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
  server = await startLoopbackHttpServer();
  base = server.base;
  // Let any window opened by earlier traffic run out, so the burst starts a fresh one.
  await Bun.sleep(1100);
});

afterAll(async () => {
  await server?.stop();
  await t?.stop();
});

describe("kernel exchange budget", () => {
  test("a burst over the cap: at most the cap per window is captured, the rest counted as rate_limit drops; the next window captures again", async () => {
    const dropsBefore = await rateLimitDrops();
    const first = await burst("/b1");
    // Both sides of each request are exchanges (curl's client side, the server's side), under one budget.
    const exchanges = 2 * REQUESTS;
    const windows = Math.ceil(first.ms / 1000) + 1;
    await until(() => t.collected.spans.filter(httpSpansUnder("/b1")).length > 0, "first burst's spans");
    // Every exchange is either exported as a span or counted as dropped (curl's CONNECT span is under the same cap).
    const spansOf = () => t.collected.spans.filter(httpSpansUnder("/b1")).length + t.collected.spans.filter((s) => s.attributes["process.pid"] === first.pid && s.name.startsWith("CONNECT")).length;
    let drops = 0;
    for (const end = Date.now() + 15_000; Date.now() < end; await Bun.sleep(100)) {
      drops = (await rateLimitDrops()) - dropsBefore;
      if (spansOf() + drops >= exchanges + 1) break;
    }
    expect(spansOf() + drops).toBeGreaterThanOrEqual(exchanges + 1);
    const captured = t.collected.spans.filter(httpSpansUnder("/b1")).length;
    expect(captured).toBeGreaterThan(0);
    expect(captured).toBeLessThanOrEqual(CAP * windows);
    expect(drops).toBeGreaterThanOrEqual(exchanges - CAP * windows);

    await Bun.sleep(1100);
    await burst("/b2");
    await until(() => t.collected.spans.filter(httpSpansUnder("/b2")).length > 0, "second burst's spans (a new window)");
    const second = t.collected.spans.filter(httpSpansUnder("/b2"));
    expect(second.length).toBeLessThanOrEqual(CAP * 2);
    for (const s of second) expect(Number(s.endNs - s.startNs)).toBeGreaterThan(0);
  });
});
