/**
 * Privileged: the memory limiter's gate in the kernel. Reloaded with a soft limit far below the agent's resident
 * memory, the agent refuses at once: /ready says memory failed, the network programs refuse HTTP exchanges in the kernel
 * (no span of a burst arrives, every exchange is counted as a span dropped with reason memory_limit, /status counts
 * the refused events). A reload without the limit opens the gate and the next burst is traced.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { startLoopbackHttpServer, startTracingAgent, until, type DecodedSpan, type TracingAgent } from "./harness";

const REQUESTS = 40;
const NETWORK = `    network:
      enabled: true`;
/** Under agent:, beside ebpf: (the harness writes this text under agent.ebpf). */
const TINY_LIMIT = `${NETWORK}
  memory_limit:
    enabled: true
    limit: 4MiB
    soft_limit: 2MiB`;
const NO_LIMIT = `${NETWORK}
  memory_limit:
    enabled: false`;

setDefaultTimeout(90_000);

let t: TracingAgent;
let server: Awaited<ReturnType<typeof startLoopbackHttpServer>>;
let base = "";

async function memoryLimitDrops(): Promise<number> {
  const text = await (await t.agent.request("/metrics")).text();
  const line = text.split("\n").find((l) => l.startsWith('svc_spans_dropped_total{reason="memory_limit"}'));
  return line ? Number(line.split(" ").at(-1)) : 0;
}

async function burst(prefix: string): Promise<void> {
  const urls = Array.from({ length: REQUESTS }, (_, i) => `${base}${prefix}/${i}`);
  const curl = Bun.spawn(["curl", "-s", "--http1.1", ...urls.flatMap((u) => ["-o", "/dev/null", u])], { stdout: "ignore", stderr: "inherit" });
  expect(await curl.exited).toBe(0);
}

const under = (prefix: string) => (s: DecodedSpan) => String(s.attributes["url.path"] ?? "").startsWith(prefix + "/");

beforeAll(async () => {
  t = await startTracingAgent(NO_LIMIT);
  await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 60_000);
  server = await startLoopbackHttpServer();
  base = server.base;
});

afterAll(async () => {
  await server?.stop();
  await t?.stop();
});

describe("memory limiter in the kernel", () => {
  test("above the soft limit: not ready, exchanges refused in the kernel and counted as memory_limit drops", async () => {
    expect(await t.reconfigure(TINY_LIMIT)).toMatchObject({ ok: true });
    const ready = await t.agent.request("/ready");
    expect(ready.status).toBe(503);
    const body = (await ready.json()) as { checks: Record<string, string> };
    expect(body.checks.memory).toStartWith("failed: refusing new data: resident memory");
    const before = await memoryLimitDrops();
    await burst("/m1");
    // Both sides of each request are exchanges (curl's and the server's).
    let drops = 0;
    for (const end = Date.now() + 20_000; Date.now() < end; await Bun.sleep(200)) {
      drops = (await memoryLimitDrops()) - before;
      if (drops >= 2 * REQUESTS) break;
    }
    expect(drops).toBeGreaterThanOrEqual(2 * REQUESTS);
    expect(t.collected.spans.filter(under("/m1"))).toEqual([]);
    const status = (await (await t.agent.request("/status")).json()) as { memory: { refusing: boolean; refused_in_kernel: number; soft_limit_bytes: number } };
    expect(status.memory.refusing).toBe(true);
    expect(status.memory.soft_limit_bytes).toBe(2 * 2 ** 20);
    expect(status.memory.refused_in_kernel).toBeGreaterThanOrEqual(2 * REQUESTS);
  });

  test("after a reload without the limit the gate opens in the kernel too: the next burst is traced", async () => {
    expect(await t.reconfigure(NO_LIMIT)).toMatchObject({ ok: true });
    expect((await t.agent.request("/ready")).status).toBe(200);
    await burst("/m2");
    await until(() => t.collected.spans.filter(under("/m2")).length >= 2 * REQUESTS, "the second burst's spans", 30_000);
    expect(t.collected.spans.filter(under("/m1"))).toEqual([]);
  });
});
