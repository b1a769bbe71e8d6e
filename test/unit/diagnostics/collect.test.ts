/** collectBundle against a stand-in agent: what its rate limit refuses (429) is asked again after Retry-After, not left out. */
import { afterAll, expect, test } from "bun:test";
import { collectBundle } from "../../../src/diagnostics/collect";

const refused = new Map<string, number>();
const server = Bun.serve({
  port: 0,
  hostname: "127.0.0.1",
  fetch(req) {
    const path = new URL(req.url).pathname;
    // Every path is refused twice (a burst over the limit), then answered. Retry-After comes in both forms:
    // delay-seconds, then an HTTP date that has passed (wait nothing).
    const n = refused.get(path) ?? 0;
    if (n < 2) {
      refused.set(path, n + 1);
      return new Response(JSON.stringify({ error: "service_unavailable", message: "rate limited", details: {} }), { status: 429, headers: { "retry-after": n === 0 ? "0" : new Date(Date.now() - 60_000).toUTCString() } });
    }
    return new Response(path === "/metrics" ? "up 1\n" : JSON.stringify({ path, records: [] }), { status: 200 });
  },
});
afterAll(() => server.stop(true));

test("requests the agent's rate limit refuses are tried again after Retry-After: logs, metrics and status are in the bundle", async () => {
  const bundle = await collectBundle({ configPath: undefined, env: {}, agentUrl: `http://127.0.0.1:${server.port}` });
  const names = bundle.files.map((f) => f.name);
  for (const name of ["agent/healthz.json", "agent/status.json", "agent/logs.json", "agent/config.json", "agent/vars.json", "metrics.txt"]) expect(names).toContain(name);
  expect(bundle.missing.filter((m) => m.reason.includes("429"))).toEqual([]);
  expect(refused.get("/admin/logs")).toBe(2);
});
