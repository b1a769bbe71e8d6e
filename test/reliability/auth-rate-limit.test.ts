/**
 * Auth and rate limit of the compiled agent over real sockets.
 * - Every documented route except the probes, /api/v1 aliases included, refuses a missing, wrong,
 *   differently-cased or padded token (401 + the error object); read-only tokens get 403 on /admin and /debug,
 *   whatever the Host header (regressions of the path-confusion bugs fixed with this suite).
 * - The token appears in no answer (every route read with it), no log line, no error message and not in the
 *   diagnostics bundle.
 * - At 10x the configured rate the accepted rate stays within 5% of the limit, globally and per client
 *   (keep-alive clients bound to 127.0.0.2/3/4 with node:net localAddress), while /healthz keeps answering 200.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BINARY, spawnAgent, type AgentProcess } from "../helpers/agent-process";
import { pacedGets, rawRequest, requestText } from "./lib/raw-http";
import { quietConfig } from "../helpers/quiet-config";

const TOKEN = "s3cr3t-Token-0123456789abcdef";
const READ_ONLY = "read-only-Token-9876543210";
const RATE = 50;
const BLAST_SECONDS = 4;
/** How far the sustained accepted rate may stand from the limit. */
const RATE_TOLERANCE = 0.05;

const authConfig = quietConfig({
  selfTelemetry: `  debug:\n    enabled: true\n  auth:\n    enabled: true\n    bearer_token: \${API_TOKEN}\n    read_only_tokens: ["\${RO_TOKEN}"]`,
});

let agent: AgentProcess;
let documented: Array<{ method: string; path: string }> = [];

beforeAll(async () => {
  agent = await spawnAgent({ config: authConfig, env: { API_TOKEN: TOKEN, RO_TOKEN: READ_ONLY } });
  const doc = (await (await fetch(`${agent.url}/openapi.json`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as {
    paths: Record<string, Record<string, unknown>>;
  };
  documented = Object.entries(doc.paths).flatMap(([t, ops]) => Object.keys(ops).map((m) => ({ method: m.toUpperCase(), path: t.replace("{profile}", "heap") })));
});
afterAll(async () => {
  expect(await agent.stop()).toBe(0);
});

const isProbe = (p: string) => /^(\/api\/v1)?\/(healthz|ready)$/.test(p);
const privileged = (p: string) => /^(\/api\/v1)?\/(admin|debug)\//.test(p);

describe("auth", () => {
  test("the document lists /api/v1 aliases, /debug, /admin, /config, /metrics and /openapi.json", () => {
    const paths = new Set(documented.map((d) => d.path));
    for (const p of ["/config", "/metrics", "/openapi.json", "/admin/reload", "/debug/vars", "/api/v1/config", "/api/v1/admin/reload", "/api/v1/debug/vars", "/api/v1/openapi.json"])
      expect(paths.has(p)).toBe(true);
  });

  test("every non-exempt route refuses a missing, wrong, differently-cased or padded token", async () => {
    const bad: Array<[string, string | undefined]> = [
      ["missing", undefined],
      ["empty", ""],
      ["wrong", "Bearer not-the-token"],
      ["token upper-cased", `Bearer ${TOKEN.toUpperCase()}`],
      ["token lower-cased", `Bearer ${TOKEN.toLowerCase()}`],
      ["two spaces inside", `Bearer  ${TOKEN}`],
      ["tab inside", `Bearer\t${TOKEN}`],
      ["space inside the token", `Bearer ${TOKEN.slice(0, 5)} ${TOKEN.slice(5)}`],
      ["suffix", `Bearer ${TOKEN}x`],
      ["prefix of the token", `Bearer ${TOKEN.slice(0, -1)}`],
      ["token without scheme", TOKEN],
      ["Basic scheme", `Basic ${Buffer.from(`user:${TOKEN}`).toString("base64")}`],
      ["trailing comma", `Bearer ${TOKEN},`],
    ];
    let checked = 0;
    for (const { method, path } of documented) {
      if (isProbe(path)) continue;
      for (const [name, header] of bad) {
        const headers: Record<string, string> = header === undefined ? {} : { authorization: header };
        const a = await rawRequest(agent.url, requestText(method, path, headers));
        expect(a.status, `${method} ${path} with ${name}`).toBe(401);
        const body = JSON.parse(a.body) as Record<string, unknown>;
        expect(Object.keys(body).sort()).toEqual(["details", "error", "message"]);
        expect(body.error).toBe("unauthorized");
        expect(a.headers["www-authenticate"]).toStartWith("Bearer");
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(300);
  }, 60_000);

  test("the scheme is case-insensitive (RFC 7235): bearer and BEARER open what Bearer opens", async () => {
    for (const scheme of ["bearer", "BEARER", "bEaReR"]) {
      const a = await rawRequest(agent.url, requestText("GET", "/status", { authorization: `${scheme} ${TOKEN}` }));
      expect(a.status, scheme).toBe(200);
    }
  });

  test("the probes answer without a token", async () => {
    for (const p of ["/healthz", "/ready", "/api/v1/healthz", "/api/v1/ready"]) {
      const a = await rawRequest(agent.url, requestText("GET", p));
      expect([200, 503], p).toContain(a.status);
    }
  });

  test("the full token reaches every route; a read-only token reads but gets 403 on /admin and /debug, whatever the Host", async () => {
    for (const { method, path } of documented) {
      if (path.endsWith("/reload") || path.includes("/pprof/heap")) continue;
      const full = await rawRequest(agent.url, requestText(method, path, { authorization: `Bearer ${TOKEN}` }));
      expect([200, 503], `${method} ${path} full`).toContain(full.status);
      for (const host of ["127.0.0.1", "", "x", "ab"]) {
        const ro = await rawRequest(agent.url, requestText(method, path, { authorization: `Bearer ${READ_ONLY}`, host }));
        if (privileged(path)) {
          expect(ro.status, `${method} ${path} read-only Host '${host}'`).toBe(403);
          expect(JSON.parse(ro.body).error).toBe("forbidden");
        } else expect([200, 503], `${method} ${path} read-only Host '${host}'`).toContain(ro.status);
      }
    }
    // Paths that a confused router would shorten to /admin or /debug.
    for (const [method, path] of [["POST", "/xx/admin/reload"], ["GET", "/xx/debug/vars"], ["POST", "/admin/reload/"], ["GET", "/api/v1/../debug/vars"]] as const) {
      for (const host of ["", "x", "ab", "abc"]) {
        const ro = await rawRequest(agent.url, requestText(method, path, { authorization: `Bearer ${READ_ONLY}`, host }));
        expect([403, 404], `${method} ${path} Host '${host}'`).toContain(ro.status);
      }
    }
  }, 60_000);

  test("the token is in no answer, header, log line or error message", async () => {
    const seen: string[] = [];
    for (const { method, path } of documented) {
      if (path.endsWith("/reload")) continue;
      for (const auth of [`Bearer ${TOKEN}`, `Bearer ${READ_ONLY}`, `Bearer ${TOKEN}x`, `bearer ${TOKEN}`]) {
        const a = await rawRequest(agent.url, requestText(method, path, { authorization: auth }));
        seen.push(a.raw);
      }
    }
    // A reload (logged) and a refused request that echoes its path.
    seen.push((await rawRequest(agent.url, requestText("POST", "/admin/reload", { authorization: `Bearer ${TOKEN}` }))).raw);
    seen.push((await rawRequest(agent.url, requestText("GET", `/nope/${TOKEN}`, { authorization: `Bearer ${TOKEN}` }))).raw);
    const all = seen.join("\n");
    // The one legitimate appearance: the path the client itself asked for, echoed in a 404's details.
    const withoutEcho = all.split(`/nope/${TOKEN}`).join("/nope/<path>");
    expect(withoutEcho).not.toContain(TOKEN);
    expect(all).not.toContain(READ_ONLY);
    expect(agent.stderr()).not.toContain(TOKEN);
    expect(agent.stderr()).not.toContain(READ_ONLY);
  }, 60_000);

  test("the diagnostics bundle of the running agent contains neither token", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-rel-diag-"));
    const out = join(dir, "bundle.tar.gz");
    // diagnostics finds the agent at self_telemetry.listen: give it the address port 0 became.
    const configPath = join(dir, "config.yaml");
    writeFileSync(configPath, authConfig.replace("listen: 127.0.0.1:0", `listen: ${agent.url.slice("http://".length)}`));
    const p = Bun.spawnSync([BINARY, "diagnostics", "--config", configPath, "--output", out], {
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", API_TOKEN: TOKEN, RO_TOKEN: READ_ONLY },
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(p.exitCode).toBe(0);
    expect(p.stderr.toString()).not.toContain(TOKEN);
    const unpacked = join(dir, "x");
    Bun.spawnSync(["mkdir", "-p", unpacked]);
    expect(Bun.spawnSync(["tar", "-xzf", out, "-C", unpacked]).exitCode).toBe(0);
    const files: string[] = [];
    const walk = (d: string) => {
      for (const f of readdirSync(d)) {
        const full = join(d, f);
        if (statSync(full).isDirectory()) walk(full);
        else files.push(full);
      }
    };
    walk(unpacked);
    expect(files.length).toBeGreaterThan(5);
    expect(files.some((f) => f.endsWith("agent/status.json"))).toBe(true);
    for (const f of files) {
      const text = readFileSync(f, "latin1");
      expect(text, f).not.toContain(TOKEN);
      expect(text, f).not.toContain(READ_ONLY);
    }
  }, 60_000);
});

/** Polls /healthz every 50 ms while `during` runs; returns the statuses seen. */
async function probing<T>(url: string, during: () => Promise<T>): Promise<{ result: T; probes: number[] }> {
  let stop = false;
  const probes: number[] = [];
  const loop = (async () => {
    while (!stop) {
      probes.push((await fetch(`${url}/healthz`)).status);
      await Bun.sleep(50);
    }
  })();
  const result = await during();
  stop = true;
  await loop;
  return { result, probes };
}

/**
 * Warms the /status route (its first answer takes ~0.5 s, during which a paced client waits and the bucket
 * caps its refill), then lets one bucket period pass so that the blast starts from a full bucket, as measured.
 */
async function warm(url: string): Promise<void> {
  for (let i = 0; i < 5; i++) await (await fetch(`${url}/status`)).arrayBuffer();
  await Bun.sleep(1100);
}

function expectWithinLimit(accepted: number, seconds: number, what: string): void {
  // A full bucket (one second's worth) at the start, then RATE per second.
  const sustained = (accepted - RATE) / seconds;
  console.log(`rate limit ${what}: ${accepted} accepted in ${seconds.toFixed(2)} s, sustained ${sustained.toFixed(2)}/s against a limit of ${RATE}/s`);
  expect(Math.abs(sustained - RATE) / RATE, `${what}: ${accepted} accepted in ${seconds.toFixed(2)} s = ${sustained.toFixed(1)}/s sustained`).toBeLessThanOrEqual(RATE_TOLERANCE);
}

describe("rate limit at 10x the configured rate", () => {
  test("global: accepted rate within 5% of the limit, 429 with the error object beyond, probes answer throughout", async () => {
    const a = await spawnAgent({ config: quietConfig({ selfTelemetry: `  rate_limit:\n    enabled: true\n    requests_per_second: ${RATE}` }) });
    try {
      const total = RATE * 10 * BLAST_SECONDS;
      await warm(a.url);
      const { result, probes } = await probing(a.url, () => pacedGets(a.url, "/status", total, RATE * 10));
      expect(result.codes["200"]! + result.codes["429"]!).toBe(total);
      expectWithinLimit(result.codes["200"]!, result.seconds, "global");
      expect(result.offered).toBeGreaterThan(RATE * 8);
      expect(probes.length).toBeGreaterThan(10);
      expect(probes.every((s) => s === 200)).toBe(true);
      const refused = await rawRequest(a.url, requestText("GET", "/status"));
      if (refused.status === 429) {
        expect(refused.headers["retry-after"]).toBe("1");
        expect(Object.keys(JSON.parse(refused.body)).sort()).toEqual(["details", "error", "message"]);
      }
    } finally {
      await a.stop();
    }
  }, 60_000);

  test("per client: three source addresses each get the limit, independently; probes answer throughout", async () => {
    const a = await spawnAgent({
      config: quietConfig({ selfTelemetry: `  rate_limit:\n    enabled: true\n    per_client: true\n    requests_per_second: ${RATE}` }),
    });
    try {
      const total = RATE * 10 * BLAST_SECONDS;
      const sources = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
      await warm(a.url);
      const { result, probes } = await probing(a.url, () => Promise.all(sources.map((s) => pacedGets(a.url, "/status", total, RATE * 10, s))));
      for (const [i, r] of result.entries()) {
        expect(r.codes["200"]! + r.codes["429"]!).toBe(total);
        expectWithinLimit(r.codes["200"]!, r.seconds, `client ${sources[i]}`);
        expect(r.offered).toBeGreaterThan(RATE * 8);
      }
      expect(probes.every((s) => s === 200)).toBe(true);
    } finally {
      await a.stop();
    }
  }, 60_000);
});
