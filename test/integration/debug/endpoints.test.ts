/** /debug/* in-process: profile.proto answers, /admin/logs (every mode, scrubbed, privileged), vars' GC figures. */
import { afterAll, expect, test } from "bun:test";
import { gunzipSync } from "node:zlib";
import { Profile } from "pprof-format";
import { QUIET_CONFIG } from "../../helpers/agent-process";
import { inProcessAgent, stopAllAgents } from "../../helpers/in-process";

afterAll(stopAllAgents);

const TOKEN = "int-debug-token-3b9d";
const READ_ONLY = "int-read-only-token-77e1";
const authConfig = QUIET_CONFIG.replace("self_telemetry:\n", `self_telemetry:\n  auth:\n    enabled: true\n    bearer_token: ${TOKEN}\n    read_only_tokens: [${READ_ONLY}]\n`);
const auth = (t: string) => ({ headers: { authorization: `Bearer ${t}` } });

test("profiles decode as gzipped profile.proto with the expected sample types", async () => {
  const a = await inProcessAgent(undefined, { forceDebug: true, backend: false });
  for (const [name, type] of [["heap", "inuse_objects"], ["allocs", "inuse_space"], ["goroutine", "goroutine"], ["threadcreate", "threadcreate"], ["block", "contentions"], ["mutex", "contentions"]] as const) {
    const r = await a.request(`/debug/pprof/${name}`);
    expect(r.status).toBe(200);
    const p = Profile.decode(gunzipSync(Buffer.from(await r.arrayBuffer())));
    expect(p.sampleType.map((t) => p.stringTable.strings[Number(t.type)])).toContain(type);
  }
  await a.stop();
});

test("/admin/logs: recent records without debug mode, the token scrubbed; no token 401, read-only tokens 403; /debug/logs is gone", async () => {
  const a = await inProcessAgent(authConfig, { backend: false });
  expect(a.agent.config.self_telemetry.debug.enabled).toBe(false);
  a.agent.logger.info("a record that mentions the token", { token_echo: TOKEN });
  expect((await a.request("/admin/logs")).status).toBe(401);
  expect((await a.request("/admin/logs", auth(READ_ONLY))).status).toBe(403);
  expect((await a.request("/debug/logs", auth(TOKEN))).status).toBe(404);
  const r = await a.request("/admin/logs", auth(TOKEN));
  expect(r.status).toBe(200);
  const text = await r.text();
  const records = (JSON.parse(text) as { records: Array<Record<string, unknown>> }).records;
  expect(records.at(-1)).toMatchObject({ level: "info", msg: "a record that mentions the token", token_echo: "[REDACTED]" });
  expect(records.some((x) => x.msg === "starting")).toBe(true);
  expect(text).not.toContain(TOKEN);
  await a.stop();
});

test("/debug/vars: NumGC and TotalAlloc move with real collections and allocation", async () => {
  const a = await inProcessAgent(undefined, { forceDebug: true, backend: false });
  const vars = async () => ((await (await a.request("/debug/vars")).json()) as { memstats: Record<string, number> }).memstats;
  const before = await vars();
  /* Still alive when read: TotalAlloc counts them whether the collection below has been reported yet (the heap before
   * it) or not (the live heap's growth). Freed first, they would be counted only once that collection's record came in. */
  let keep: unknown[] = [];
  for (let i = 0; i < 200_000; i++) keep.push({ i, s: `x${i}` });
  Bun.gc(true);
  const after = await vars();
  expect(keep.length).toBe(200_000);
  keep = [];
  expect(after.NumGC).toBeGreaterThan(before.NumGC!);
  expect(after.TotalAlloc).toBeGreaterThan(before.TotalAlloc! + 1_000_000);
  expect(after.PauseTotalNs).toBeGreaterThan(before.PauseTotalNs!);
  await a.stop();
});
