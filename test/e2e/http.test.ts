/**
 * The HTTP interface of the compiled binary, with real peers: promtool checks a live scrape, a real Prometheus
 * scrapes the agent, a second exposition parser (python3-prometheus-client) reads it, and auth works over a socket.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Validator } from "@seriousme/openapi-schema-validator";
import { OtlpReceiver } from "../../src/export/receiver";
import { QUIET_CONFIG, spawnAgent, type AgentProcess } from "../helpers/agent-process";
import { OpenApiChecker } from "../helpers/openapi";
import { json, waitUntil } from "../helpers/wait";

const TOKEN = "e2e-token-Zq81";
let backend: OtlpReceiver;
let agent: AgentProcess;
let OTLP_ENDPOINT: string;

beforeAll(async () => {
  backend = new OtlpReceiver({ listen: "127.0.0.1:0" });
  OTLP_ENDPOINT = `127.0.0.1:${await backend.start()}`;
  agent = await spawnAgent({ env: { OTLP_ENDPOINT } });
  await waitUntil(async () => (await fetch(`${agent.url}/ready`)).status === 200, { what: "agent ready" });
});

afterAll(async () => {
  await agent?.stop();
  await backend?.stop();
});

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

describe("metrics with real parsers", () => {
  test("promtool check metrics exits 0 on a live scrape", async () => {
    const text = await (await fetch(`${agent.url}/metrics`)).text();
    const p = Bun.spawnSync(["promtool", "check", "metrics"], { stdin: new TextEncoder().encode(text) });
    expect(p.stdout.toString() + p.stderr.toString()).toBe("");
    expect(p.exitCode).toBe(0);
  });

  test("the OpenMetrics answer parses with python's prometheus_client", async () => {
    const text = await (await fetch(`${agent.url}/metrics`, { headers: { accept: "application/openmetrics-text" } })).text();
    const p = Bun.spawnSync(
      ["/usr/bin/python3", "-c", "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as f\nprint(len(list(f(sys.stdin.read()))))"],
      { stdin: new TextEncoder().encode(text) },
    );
    expect(p.stderr.toString()).toBe("");
    expect(Number(p.stdout.toString())).toBeGreaterThanOrEqual(23);
  });

  test("a real Prometheus scrapes the agent", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-prom-"));
    const target = agent.url.replace("http://", "");
    writeFileSync(
      join(dir, "prometheus.yml"),
      `global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: svc-agent\n    static_configs:\n      - targets: ["${target}"]\n`,
    );
    const port = await freePort();
    const prom = Bun.spawn(
      ["prometheus", `--config.file=${join(dir, "prometheus.yml")}`, `--storage.tsdb.path=${join(dir, "data")}`, `--web.listen-address=127.0.0.1:${port}`],
      { stdout: "ignore", stderr: "ignore" },
    );
    try {
      const value = await waitUntil(
        async () => {
          try {
            const r = await fetch(`http://127.0.0.1:${port}/api/v1/query?query=svc_go_goroutines`);
            const body = (await json(r)) as { data?: { result?: Array<{ value: [number, string] }> } };
            return body.data?.result?.[0]?.value[1];
          } catch {
            return undefined;
          }
        },
        { timeoutMs: 30_000, what: "Prometheus to scrape the agent" },
      );
      expect(Number(value)).toBeGreaterThanOrEqual(1);
      const up = await json(await fetch(`http://127.0.0.1:${port}/api/v1/query?query=up`));
      expect(up.data.result[0].value[1]).toBe("1");
    } finally {
      prom.kill("SIGTERM");
      await prom.exited;
    }
    // Prometheus's first scrape comes ~5 s after its start: more than bun test's default 5 s per test.
  }, 60_000);
});

describe("live answers over a socket", () => {
  test("every documented operation (debug mode on) answers as the document says, checked by ajv", async () => {
    const debug = await spawnAgent({ config: QUIET_CONFIG.replace("self_telemetry:\n", "self_telemetry:\n  debug:\n    enabled: true\n"), env: { OTLP_ENDPOINT } });
    try {
      await waitUntil(async () => (await fetch(`${debug.url}/ready`)).status === 200, { what: "agent ready" });
      const doc = await json(await fetch(`${debug.url}/openapi.json`));
      const v = await new Validator().validate(doc);
      expect(v.valid).toBe(true);
      const checker = new OpenApiChecker(doc);
      const problems: string[] = [];
      let answered = 0;
      for (const [template, item] of Object.entries(doc.paths as Record<string, Record<string, unknown>>))
        for (const method of Object.keys(item)) {
          const paths = template.includes("{profile}")
            ? ["heap", "goroutine", "goroutine?debug=2", "mutex", "trace?seconds=1"].map((x) => template.replace("{profile}", x))
            : [template];
          for (const path of paths) {
            const r = await fetch(debug.url + path, { method: method.toUpperCase() });
            expect(r.status, `${method} ${path}`).toBeLessThan(400);
            problems.push(...(await checker.check(method.toUpperCase(), new URL(path, "http://x").pathname, r)));
            answered++;
          }
        }
      for (const [m, p] of [["GET", "/nope"], ["DELETE", "/status"], ["POST", "/metrics"], ["GET", "/admin/reload"]] as const)
        problems.push(...(await checker.check(m, p, await fetch(debug.url + p, { method: m }))));
      problems.push(...(await checker.check("POST", "/admin/flush", await fetch(`${debug.url}/admin/flush`, { method: "POST", body: "x".repeat(2 * 1024 * 1024) }))));
      expect(problems).toEqual([]);
      expect(answered).toBeGreaterThan(30);
    } finally {
      await debug.stop();
    }
    const s = await json(await fetch(`${agent.url}/status/export`));
    expect(s.connected).toBe(true);
    expect(s.endpoint).toBe(OTLP_ENDPOINT);
  }, 60_000);

  test("requests that are not HTTP-shaped for the interface get the error object", async () => {
    const r = await fetch(`${agent.url}/status`, { method: "PUT" });
    expect(r.status).toBe(405);
    expect((await json(r)).error).toBe("invalid_request");
    const big = await fetch(`${agent.url}/admin/flush`, { method: "POST", body: "x".repeat(2 * 1024 * 1024) });
    expect(big.status).toBe(413);
  });
});

describe("auth and rate limit in the binary", () => {
  let guarded: AgentProcess;
  beforeAll(async () => {
    guarded = await spawnAgent({
      config: QUIET_CONFIG.replace(
        "self_telemetry:\n",
        "self_telemetry:\n  auth:\n    enabled: true\n    bearer_token: ${API_TOKEN}\n  rate_limit:\n    enabled: true\n    requests_per_second: 20\n",
      ),
      env: { OTLP_ENDPOINT, API_TOKEN: TOKEN },
    });
  });
  afterAll(() => guarded?.stop());

  test("401 without the token, 200 with it, probes exempt; the token is in no answer or log line", async () => {
    const denied = await fetch(`${guarded.url}/status`);
    expect(denied.status).toBe(401);
    expect(denied.headers.get("www-authenticate")).toStartWith("Bearer");
    expect((await fetch(`${guarded.url}/healthz`)).status).toBe(200);
    const ok = await fetch(`${guarded.url}/config`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(ok.status).toBe(200);
    expect(await ok.text()).not.toContain(TOKEN);
    // The scheme's case does not matter (RFC 7235), the token's does.
    for (const scheme of ["bearer", "BEARER"]) expect((await fetch(`${guarded.url}/status`, { headers: { authorization: `${scheme} ${TOKEN}` } })).status).toBe(200);
    expect((await fetch(`${guarded.url}/status`, { headers: { authorization: `bearer ${TOKEN.toLowerCase()}` } })).status).toBe(401);
    await fetch(`${guarded.url}/status`, { headers: { authorization: `Bearer ${TOKEN}x` } });
    expect(guarded.stderr()).not.toContain(TOKEN);
  });

  test("beyond the rate: 429 with Retry-After: 1 while probes keep answering", async () => {
    const statuses = await Promise.all(
      Array.from({ length: 60 }, () => fetch(`${guarded.url}/status`, { headers: { authorization: `Bearer ${TOKEN}` } }).then((r) => r.status)),
    );
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThan(0);
    const r = await fetch(`${guarded.url}/status`, { headers: { authorization: `Bearer ${TOKEN}` } });
    if (r.status === 429) expect(r.headers.get("retry-after")).toBe("1");
    for (let i = 0; i < 30; i++) expect((await fetch(`${guarded.url}/healthz`)).status).toBe(200);
  });
});
