/**
 * Reload, flush, read-only tokens, CORS, debug gating and /api/v1 aliases through the compiled binary over
 * real sockets, including a reload whose apply fails (the new listen address is taken) and one that rebinds.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { OtlpReceiver } from "../../src/export/receiver";
import { QUIET_CONFIG, spawnAgent, type AgentProcess } from "../helpers/agent-process";
import { json, waitUntil } from "../helpers/wait";

const TOKEN = "admin-Token-77";
const READER = "reader-Token-88";
let backend: OtlpReceiver;
let OTLP_ENDPOINT: string;

const config = (extra = "") =>
  QUIET_CONFIG.replace(
    "self_telemetry:\n",
    `self_telemetry:\n  auth:\n    enabled: true\n    bearer_token: \${API_TOKEN}\n    read_only_tokens: [${READER}]\n  cors:\n    enabled: true\n    allowed_origins: [https://console.example]\n${extra}`,
  );

let agent: AgentProcess;
const admin = { authorization: `Bearer ${TOKEN}` };
const reader = { authorization: `Bearer ${READER}` };

beforeAll(async () => {
  backend = new OtlpReceiver({ listen: "127.0.0.1:0" });
  OTLP_ENDPOINT = `127.0.0.1:${await backend.start()}`;
  agent = await spawnAgent({ config: config(), env: { OTLP_ENDPOINT, API_TOKEN: TOKEN } });
});

afterAll(async () => {
  expect(await agent?.stop()).toBe(0);
  expect(agent.stderr()).not.toContain(TOKEN);
  expect(agent.stderr()).not.toContain(READER);
  await backend?.stop();
});

describe("admin over a socket", () => {
  test("flush answers the real counts", async () => {
    const r = await fetch(`${agent.url}/admin/flush`, { method: "POST", headers: admin });
    expect(r.status).toBe(200);
    const body = await json(r);
    expect(body.status).toBe("ok");
    for (const k of ["traces", "metrics", "logs"]) expect(Number.isInteger(body.flushed[k])).toBe(true);
  });

  test("read-only token: reads work, admin and debug are 403", async () => {
    expect((await fetch(`${agent.url}/status`, { headers: reader })).status).toBe(200);
    const r = await fetch(`${agent.url}/api/v1/admin/reload`, { method: "POST", headers: reader });
    expect(r.status).toBe(403);
    expect((await json(r)).error).toBe("forbidden");
  });

  test("debug endpoints are 404 without debug mode, even with the token", async () => {
    const r = await fetch(`${agent.url}/debug/vars`, { headers: admin });
    expect(r.status).toBe(404);
    expect((await json(r)).error).toBe("not_found");
  });

  test("CORS: allowed origin, denied origin, preflight without a token", async () => {
    const ok = await fetch(`${agent.url}/status`, { headers: { ...admin, origin: "https://console.example" } });
    expect(ok.headers.get("access-control-allow-origin")).toBe("https://console.example");
    const denied = await fetch(`${agent.url}/status`, { headers: { ...admin, origin: "https://evil.example" } });
    expect(denied.headers.get("access-control-allow-origin")).toBeNull();
    const pre = await fetch(`${agent.url}/status`, {
      method: "OPTIONS",
      headers: { origin: "https://console.example", "access-control-request-method": "GET" },
    });
    expect(pre.status).toBeLessThan(300);
    expect(pre.headers.get("access-control-allow-origin")).toBe("https://console.example");
  });

  test("CORS: a 401 to an allowed origin carries the CORS headers; unknown paths stay 404", async () => {
    const denied = await fetch(`${agent.url}/status`, { headers: { origin: "https://console.example" } });
    expect(denied.status).toBe(401);
    expect(denied.headers.get("access-control-allow-origin")).toBe("https://console.example");
    expect(denied.headers.get("access-control-expose-headers")).toContain("WWW-Authenticate");
    const missing = await fetch(`${agent.url}/no/such/path`, { headers: { ...admin, origin: "https://console.example" } });
    expect(missing.status).toBe(404);
    expect((await json(missing)).error).toBe("not_found");
    expect(missing.headers.get("allow")).toBeNull();
  });

  test("reload: invalid file 400 with key paths, nothing changed; valid file 200 and applied (debug mode on)", async () => {
    writeFileSync(agent.configPath, config() + "bogus: 1\n");
    const bad = await fetch(`${agent.url}/admin/reload`, { method: "POST", headers: admin });
    expect(bad.status).toBe(400);
    expect((await json(bad)).details.problems).toEqual([{ path: "bogus", message: "unknown key", line: config().split("\n").length, column: 1 }]);
    expect((await fetch(`${agent.url}/debug/vars`, { headers: admin })).status).toBe(404);

    writeFileSync(agent.configPath, config("  debug:\n    enabled: true\n"));
    const ok = await fetch(`${agent.url}/api/v1/admin/reload`, { method: "POST", headers: admin });
    expect(ok.status).toBe(200);
    expect((await json(ok)).status).toBe("ok");
    const vars = await fetch(`${agent.url}/debug/vars`, { headers: admin });
    expect(vars.status).toBe(200);
    expect((await json(vars)).cmdline).toEqual([expect.stringContaining("dist/svc-agent"), "--config", agent.configPath]);
  });

  test("reload to a listen address that is taken: 500, the previous configuration keeps serving", async () => {
    const blocker = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("x") });
    try {
      writeFileSync(agent.configPath, config().replace("listen: 127.0.0.1:0", `listen: 127.0.0.1:${blocker.port}`));
      const r = await fetch(`${agent.url}/admin/reload`, { method: "POST", headers: admin });
      expect(r.status).toBe(500);
      const body = await json(r);
      expect(body.error).toBe("internal_error");
      expect(body.message).toContain(`cannot listen on 127.0.0.1:${blocker.port}`);
      expect((await fetch(`${agent.url}/healthz`)).status).toBe(200);
    } finally {
      blocker.stop(true);
    }
  });

  test("reload to a new listen address rebinds: the new address serves, the old one stops", async () => {
    const old = agent.url;
    writeFileSync(agent.configPath, config().replace("listen: 127.0.0.1:0", "listen: 127.0.0.2:0"));
    expect((await fetch(`${old}/admin/reload`, { method: "POST", headers: admin })).status).toBe(200);
    const rec = await agent.waitFor((r) => r.msg === "listening" && String(r.address).startsWith("127.0.0.2:"));
    const fresh = `http://${String(rec.address)}`;
    expect(fresh).toStartWith("http://127.0.0.2:");
    expect((await fetch(`${fresh}/healthz`)).status).toBe(200);
    await waitUntil(
      async () => {
        try {
          await fetch(`${old}/healthz`);
          return false;
        } catch {
          return true;
        }
      },
      { what: "the old listener to close" },
    );
    agent.url = fresh;
  });
});
