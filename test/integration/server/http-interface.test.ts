/**
 * The self-telemetry HTTP interface through `app.handle`: every endpoint, status codes, auth, rate limit,
 * CORS, reload, flush, debug gating, /api/v1 aliases, and the error object on every error path.
 * Every answer is also checked against the live OpenAPI document.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Validator } from "@seriousme/openapi-schema-validator";
import type { Component, ComponentHost } from "../../../src/lifecycle/component";
import { createServer } from "../../../src/server/app";
import { RESERVED_PATHS } from "../../../src/server/config";
import { QUIET_CONFIG } from "../../helpers/agent-process";
import { inProcessAgent, stopAllAgents, type InProcessAgent } from "../../helpers/in-process";
import { OpenApiChecker } from "../../helpers/openapi";
import { json } from "../../helpers/wait";
import { closedLoopbackPort } from "../../helpers/ports";

const TOKEN = "tok-Very-Secret-123";
const READER = "reader-token-456";

let checker: OpenApiChecker;
const mismatches: string[] = [];

/** Sends a request and checks the answer against the OpenAPI document (every answer: 404, 405, 413 included). */
async function call(a: InProcessAgent, method: string, path: string, headers: Record<string, string> = {}, body?: string) {
  const r = await a.request(path, { method, headers, body });
  const p = new URL(path, "http://x").pathname;
  if (checker) mismatches.push(...(await checker.check(method, p, r, a.agent.config.self_telemetry.cors.enabled)));
  return r;
}

async function expectError(r: Response, status: number, code: string) {
  expect(r.status).toBe(status);
  expect(r.headers.get("content-type")).toStartWith("application/json");
  const body = await json(r);
  expect(Object.keys(body).sort()).toEqual(["details", "error", "message"]);
  expect(body.error).toBe(code);
  expect(typeof body.message).toBe("string");
  expect(JSON.stringify(body)).not.toMatch(/\bat .*\.ts:\d+/); // no stack traces
  return body;
}

let plain: InProcessAgent;

beforeAll(async () => {
  plain = await inProcessAgent();
  const r = await plain.request("/openapi.json");
  const doc = await json(r);
  const v = await new Validator().validate(doc);
  if (!v.valid) throw new Error("OpenAPI document invalid: " + JSON.stringify(v.errors).slice(0, 2000));
  checker = new OpenApiChecker(doc);
});

afterAll(async () => {
  await stopAllAgents();
  expect(mismatches).toEqual([]);
});

describe("OpenAPI", () => {
  test("3.1 document with every path, method, the error object and the bearer scheme", async () => {
    const doc = await json(await call(plain, "GET", "/openapi.json"));
    expect(doc.openapi).toStartWith("3.1");
    const paths = Object.keys(doc.paths);
    for (const p of ["/healthz", "/ready", "/metrics", "/status", "/status/ebpf", "/status/export", "/status/discovery", "/config", "/debug/vars", "/debug/pprof/", "/debug/pprof/{profile}", "/admin/reload", "/admin/flush", "/openapi.json"]) {
      expect(paths).toContain(p);
      expect(paths).toContain(`/api/v1${p}`);
    }
    expect(Object.keys(doc.paths["/admin/reload"])).toEqual(["post"]);
    expect(Object.keys(doc.paths["/admin/reload"].post.responses).sort()).toEqual(["200", "400", "401", "403", "413", "429", "500"]);
    expect(doc.components.securitySchemes.bearerAuth).toEqual(expect.objectContaining({ type: "http", scheme: "bearer" }));
    expect(doc.components.schemas.Error.properties.error.anyOf ?? doc.components.schemas.Error.properties.error.enum).toBeDefined();
    expect(Object.keys(doc.components.responses).sort()).toEqual(["MethodNotAllowed", "NotFound", "PayloadTooLarge", "TooManyRequests", "Unauthorized"]);
    expect(doc.components.responses.MethodNotAllowed.headers.Allow.required).toBe(true);
    expect(doc.paths["/status"].get.responses["429"].headers["Retry-After"].required).toBe(true);
    expect(doc.paths["/status"].get.responses["401"].headers["WWW-Authenticate"].required).toBe(true);
    expect(Object.keys(doc.paths["/metrics"].get.responses["200"].content).map((k) => k.split(";")[0])).toEqual(["text/plain", "application/openmetrics-text"]);
    expect(Object.keys(doc.paths["/debug/pprof/"].get.responses["200"].content).map((k) => k.split(";")[0])).toEqual(["text/html"]);
  });
});

describe("OpenAPI of the listener's routes", () => {
  test("routes that check no answers (the listener's) serve the same document as the checked ones", async () => {
    const unchecked = createServer(plain.deps, { checkAnswers: false });
    const served = await json(await unchecked.handle(new Request("http://localhost/openapi.json")));
    expect(served).toEqual(await json(await plain.request("/openapi.json")));
    expect(Object.keys(served.paths["/healthz"].get.responses).sort()).toEqual(["200", "401", "413", "429", "500", "503"]);
    expect(Object.keys(served.paths["/api/v1/status"].get.responses).sort()).toEqual(["200", "401", "413", "429", "500"]);
    // ... while the listener's hot routes give Elysia no answer schemas to compile.
    const hot = unchecked.routes.filter((r) => ["/healthz", "/ready", "/status", "/metrics"].includes(r.path));
    expect(hot.length).toBe(4);
    for (const r of hot) expect((r.hooks as { response?: unknown }).response).toBeUndefined();
  });
});

describe("live answers against the document", () => {
  test("/config durations and sizes are what the loader accepts, not ISO 8601: the document says so", async () => {
    const doc = await json(await call(plain, "GET", "/openapi.json"));
    const config = doc.paths["/config"].get.responses["200"].content["application/json"].schema;
    expect(config.properties.shutdown_timeout.format).toBeUndefined();
    expect(config.properties.shutdown_timeout.pattern).toBeDefined();
    expect(JSON.stringify(doc)).not.toContain('"format":"duration"');
    const live = await json(await call(plain, "GET", "/config"));
    expect(live.shutdown_timeout).toBe("10s");
  });

  test("every documented operation, debug mode on, answers a documented status, content type and body", async () => {
    const a = await inProcessAgent(QUIET_CONFIG.replace("self_telemetry:\n", "self_telemetry:\n  debug:\n    enabled: true\n"));
    const doc = await json(await a.request("/openapi.json"));
    const seen = new Set<string>();
    for (const [template, item] of Object.entries(doc.paths as Record<string, Record<string, unknown>>))
      for (const method of Object.keys(item)) {
        const concrete = template.includes("{profile}")
          ? ["heap", "allocs", "goroutine", "goroutine?debug=1", "goroutine?debug=2", "threadcreate", "block", "mutex", "profile?seconds=1", "trace?seconds=1"].map((x) =>
              template.replace("{profile}", x),
            )
          : [template];
        for (const path of concrete) {
          const before = mismatches.length;
          const r = await a.request(path, { method: method.toUpperCase() });
          const problems = await checker.check(method.toUpperCase(), new URL(path, "http://x").pathname, r);
          mismatches.push(...problems);
          expect(problems, `${method} ${path}`).toEqual([]);
          expect(mismatches.length).toBe(before);
          expect(r.status, `${method} ${path}`).toBeLessThan(400);
          seen.add(`${r.status} ${(r.headers.get("content-type") ?? "").split(";")[0]}`);
        }
      }
    // The debug media types were all exercised.
    for (const t of ["200 text/html", "200 application/octet-stream", "200 text/plain", "200 application/gzip", "200 application/json"]) expect(seen).toContain(t);
  }, 60_000);

  test("404 (unknown path), 405 (other method) and 413 (body over the limit) match components.responses", async () => {
    for (const [m, p] of [["GET", "/nope"], ["POST", "/api/v1/nope"], ["DELETE", "/status"], ["POST", "/healthz"], ["PUT", "/admin/reload"], ["GET", "/admin/flush"]] as const) {
      const r = await call(plain, m, p);
      expect([404, 405]).toContain(r.status);
    }
    const big = await call(plain, "POST", "/admin/flush", { "content-length": String(2 * 1024 * 1024) }, "x".repeat(2 * 1024 * 1024));
    expect(big.status).toBe(413);
  });
});

describe("endpoints", () => {
  test("GET /healthz is 200 ok", async () => {
    const r = await call(plain, "GET", "/healthz");
    expect(r.status).toBe(200);
    expect(await json(r)).toEqual({ status: "ok" });
    expect(r.headers.get("x-content-type-options")).toBe("nosniff");
    expect(r.headers.get("cache-control")).toBe("no-store");
  });

  test("GET /ready with a reachable backend and the rest disabled is ready", async () => {
    const r = await call(plain, "GET", "/ready");
    expect(r.status).toBe(200);
    expect(await json(r)).toEqual({ status: "ready", checks: { ebpf: "ok", otlp: "ok", discovery: "ok", memory: "ok" } });
  });

  test("GET /status has the spec's fields with their types", async () => {
    const body = await json(await call(plain, "GET", "/status"));
    expect(body.uptime).toMatch(/^\d+h\d+m\d+s$/);
    expect(body.mode).toBe("agent");
    expect(Object.keys(body.host).sort()).toEqual(["arch", "kernel", "name", "os"]);
    expect(typeof body.ebpf.ringbuf_size).toBe("number");
    expect(body.export.endpoint).toBe(plain.agent.config.otlp.endpoint);
    expect(body.export.connected).toBe(true);
  });

  test.each(["/status/ebpf", "/status/export", "/status/discovery", "/config"])("GET %s is 200 and documented", async (p) => {
    expect((await call(plain, "GET", p)).status).toBe(200);
  });

  test("GET /metrics is Prometheus text with HELP and TYPE", async () => {
    const r = await call(plain, "GET", "/metrics");
    expect(r.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    const text = await r.text();
    expect(text).toContain("# HELP svc_spans_collected_total");
    expect(text).toContain("# TYPE svc_export_latency_seconds histogram");
  });

  test("GET /metrics gives OpenMetrics when asked and gzip when allowed", async () => {
    const om = await call(plain, "GET", "/metrics", { accept: "application/openmetrics-text; version=1.0.0" });
    expect(om.headers.get("content-type")).toStartWith("application/openmetrics-text");
    expect(await om.text()).toEndWith("# EOF\n");
    const gz = await call(plain, "GET", "/metrics", { "accept-encoding": "gzip, deflate" });
    expect(gz.headers.get("content-encoding")).toBe("gzip");
    const text = new TextDecoder().decode(Bun.gunzipSync(new Uint8Array(await gz.arrayBuffer())));
    expect(text).toContain("# HELP svc_go_goroutines");
  });

  test("POST /admin/flush reports counts per kind", async () => {
    const r = await call(plain, "POST", "/admin/flush");
    expect(r.status).toBe(200);
    const body = await json(r);
    expect(body.status).toBe("ok");
    expect(Object.keys(body.flushed).sort()).toEqual(["logs", "metrics", "profiles", "traces"]);
    expect(body.remaining).toEqual({ traces: 0, metrics: 0, logs: 0, profiles: 0 });
    expect(body.reason).toBeNull();
  });

  test("POST /admin/flush exports what is queued and reports the real counts", async () => {
    const a = await inProcessAgent(
      QUIET_CONFIG + "queues:\n  traces:\n    batch_timeout: 1h\n  logs:\n    batch_timeout: 1h\n",
    );
    const now = BigInt(Date.now()) * 1_000_000n;
    const span = (i: number) => ({
      traceId: new Uint8Array(16).fill(1),
      spanId: new Uint8Array(8).fill(i + 1),
      name: `op${i}`,
      kind: 1 as const,
      startTimeUnixNano: now,
      endTimeUnixNano: now + 1000n,
    });
    const log = (i: number) => ({ timeUnixNano: now, observedTimeUnixNano: now, severityNumber: 9, severityText: "INFO", body: `line ${i}` });
    expect(a.agent.ctx.pipeline.submit("traces", Array.from({ length: 7 }, (_, i) => span(i)))).toBe(7);
    expect(a.agent.ctx.pipeline.submit("logs", Array.from({ length: 3 }, (_, i) => log(i)))).toBe(3);
    const before = a.received.length;
    const r = await call(a, "POST", "/admin/flush");
    const none = { traces: 0, metrics: 0, logs: 0, profiles: 0 };
    expect(await json(r)).toEqual({ status: "ok", flushed: { ...none, traces: 7, logs: 3 }, dropped: none, remaining: none, reason: null, last_error: null });
    const arrived = a.received.slice(before);
    expect(arrived.filter((q) => q.signal === "traces").reduce((n, q) => n + q.items, 0)).toBe(7);
    expect(arrived.filter((q) => q.signal === "logs").reduce((n, q) => n + q.items, 0)).toBe(3);
    const again = await call(a, "POST", "/admin/flush");
    expect((await json(again)).flushed).toEqual({ traces: 0, metrics: 0, logs: 0, profiles: 0 });
  });

  test("POST /admin/flush while the backend is down: incomplete, with what remains and why", async () => {
    const a = await inProcessAgent(QUIET_CONFIG + "backoff:\n  initial: 30s\n  max: 30s\n", { backend: false, env: { OTLP_ENDPOINT: `127.0.0.1:${closedLoopbackPort()}` } });
    const now = BigInt(Date.now()) * 1_000_000n;
    const log = (i: number) => ({ timeUnixNano: now, observedTimeUnixNano: now, severityNumber: 9, severityText: "INFO", body: `line ${i}` });
    expect(a.agent.ctx.pipeline.submit("logs", Array.from({ length: 4 }, (_, i) => log(i)))).toBe(4);
    const r = await call(a, "POST", "/admin/flush");
    expect(r.status).toBe(200);
    const body = await json(r);
    expect(body).toMatchObject({ status: "incomplete", flushed: { logs: 0 }, remaining: { traces: 0, metrics: 0, logs: 4, profiles: 0 }, reason: "export_failed" });
    expect(body.last_error).toStartWith("UNAVAILABLE: ");
  });

  test("every endpoint is also served under /api/v1", async () => {
    for (const p of ["/healthz", "/ready", "/status", "/status/ebpf", "/status/export", "/status/discovery", "/config", "/metrics", "/openapi.json"]) {
      expect((await call(plain, "GET", `/api/v1${p}`)).status).toBe(200);
    }
    expect((await call(plain, "POST", "/api/v1/admin/flush")).status).toBe(200);
  });
});

describe("errors", () => {
  test("unknown path is 404 not_found", async () => {
    await expectError(await call(plain, "GET", "/nope"), 404, "not_found");
    await expectError(await call(plain, "GET", "/api/v1/nope"), 404, "not_found");
  });

  test("wrong method is 405 invalid_request with Allow", async () => {
    const r = await call(plain, "DELETE", "/status");
    expect(r.headers.get("allow")).toBe("GET");
    await expectError(r, 405, "invalid_request");
    const r2 = await call(plain, "GET", "/admin/reload");
    expect(r2.headers.get("allow")).toBe("POST");
    await expectError(r2, 405, "invalid_request");
  });

  test("a body over the limit is 413", async () => {
    const r = await call(plain, "POST", "/admin/flush", { "content-length": String(2 * 1024 * 1024) }, "x".repeat(2 * 1024 * 1024));
    await expectError(r, 413, "invalid_request");
  });

  test("debug endpoints are 404 without debug mode", async () => {
    for (const p of ["/debug/vars", "/debug/pprof/", "/debug/pprof/heap", "/api/v1/debug/vars"]) await expectError(await call(plain, "GET", p), 404, "not_found");
  });

  test("a failing handler is 500 internal_error without a stack trace", async () => {
    plain.agent.status.provide("ebpf", () => {
      throw new Error("secret internals at /src/x.ts:12");
    });
    try {
      const body = await expectError(await call(plain, "GET", "/status/ebpf"), 500, "internal_error");
      expect(body.message).not.toContain("secret internals");
    } finally {
      plain.agent.status.withdraw("ebpf");
    }
  });
});

/** A component whose state the test controls; refuses reloads to service_name "explode". */
function controllable() {
  let host!: ComponentHost;
  const c: Component = {
    id: "test/controllable",
    readiness: "otlp",
    async start(h) {
      host = h;
      h.report("ok");
    },
    async shutdown() {},
    async reload(next) {
      if (next.service_name === "explode") throw new Error("cannot apply service_name explode");
    },
  };
  return { component: c, report: (s: Parameters<ComponentHost["report"]>[0], reason?: string) => host.report(s, reason) };
}

describe("health and readiness follow component states", () => {
  test("a failed check is 503 not_ready with the reason, and recovers", async () => {
    const ctl = controllable();
    const a = await inProcessAgent(QUIET_CONFIG, { extraComponents: () => [ctl.component] });
    ctl.report("recoverable_error", "connection refused");
    const r = await call(a, "GET", "/ready");
    expect(r.status).toBe(503);
    expect(await json(r)).toEqual({ status: "not_ready", checks: { ebpf: "ok", otlp: "failed: connection refused", discovery: "ok", memory: "ok" } });
    ctl.report("ok");
    expect((await call(a, "GET", "/ready")).status).toBe(200);
    ctl.report("fatal_error", "disk gone");
    const h = await call(a, "GET", "/healthz");
    expect(h.status).toBe(503);
    expect(await json(h)).toEqual({ status: "unhealthy", reasons: ["test/controllable: disk gone"] });
  });
});

describe("the metrics path", () => {
  test("RESERVED_PATHS covers every route the interface serves, so the metrics path is the only free one", () => {
    const paths = [...new Set(plain.app.routes.map((r) => r.path))];
    expect(paths.length).toBeGreaterThan(20);
    const uncovered = paths.filter((p) => p !== "/metrics" && p !== "/api/v1/metrics" && !RESERVED_PATHS.some((r) => p === r || p.startsWith(r + "/")));
    expect(uncovered).toEqual([]);
  });

  test("a reload to a path that shadows a route is 400 naming self_telemetry.path; /healthz keeps its answer", async () => {
    const a = await inProcessAgent();
    for (const path of ["/healthz", "/status", "/api/v1/ready", "/debug/vars"]) {
      a.writeConfig(QUIET_CONFIG.replace("self_telemetry:\n", `self_telemetry:\n  path: ${path}\n`));
      const bad = await expectError(await call(a, "POST", "/admin/reload"), 400, "invalid_request");
      expect(bad.details.problems.map((p: { path: string }) => p.path)).toEqual(["self_telemetry.path"]);
    }
    expect(await json(await call(a, "GET", "/healthz"))).toEqual({ status: "ok" });
    expect(a.agent.config.self_telemetry.path).toBe("/metrics");
  });
});

describe("reload", () => {
  test("valid: 200; invalid: 400 with key paths and nothing changed; apply failure: 500 and restored", async () => {
    const ctl = controllable();
    const a = await inProcessAgent(QUIET_CONFIG, { extraComponents: () => [ctl.component] });
    a.writeConfig(QUIET_CONFIG + "service_name: renamed\nsvc:\n  log_level: debug\n");
    const ok = await call(a, "POST", "/admin/reload");
    expect(ok.status).toBe(200);
    expect((await json(ok)).status).toBe("ok");
    expect(a.agent.config.service_name).toBe("renamed");
    expect(a.agent.logger.level).toBe("debug");

    a.writeConfig(QUIET_CONFIG + "service_name: 5\nbogus: true\nshutdown_timeout: soon\n");
    const bad = await expectError(await call(a, "POST", "/admin/reload"), 400, "invalid_request");
    expect(bad.details.problems.map((p: { path: string }) => p.path).sort()).toEqual(["bogus", "service_name", "shutdown_timeout"]);
    expect(a.agent.config.service_name).toBe("renamed");

    a.writeConfig(QUIET_CONFIG + "service_name: explode\nsvc:\n  log_level: error\n");
    const failed = await expectError(await call(a, "POST", "/admin/reload"), 500, "internal_error");
    expect(failed.message).toContain("cannot apply service_name explode");
    expect(a.agent.config.service_name).toBe("renamed");
    expect(a.agent.logger.level).toBe("debug");
  });

  test("concurrent reloads never interleave", async () => {
    const a = await inProcessAgent();
    const results = await Promise.all(Array.from({ length: 5 }, () => call(a, "POST", "/admin/reload")));
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(a.agent.generation).toBe(5);
    expect(a.agent.supervisor.reloadLock.contentions).toBe(4);
  });

  test("a reload changes the metric namespace and keeps the values", async () => {
    const a = await inProcessAgent();
    a.agent.metrics.spans.collected.inc(3);
    a.writeConfig(QUIET_CONFIG.replace("self_telemetry:\n", "self_telemetry:\n  prometheus_namespace: myagent\n"));
    expect((await call(a, "POST", "/admin/reload")).status).toBe(200);
    const text = await (await call(a, "GET", "/metrics")).text();
    expect(text).toContain("myagent_spans_collected_total 3");
  });
});

const AUTH_CONFIG = QUIET_CONFIG.replace(
  "self_telemetry:\n",
  `self_telemetry:\n  debug:\n    enabled: true\n  auth:\n    enabled: true\n    bearer_token: \${API_TOKEN}\n    read_only_tokens: [${READER}]\n`,
);

describe("authentication", () => {
  let a: InProcessAgent;
  beforeAll(async () => {
    a = await inProcessAgent(AUTH_CONFIG, { env: { API_TOKEN: TOKEN } });
  });
  const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

  test("probes are exempt by default", async () => {
    expect((await call(a, "GET", "/healthz")).status).toBe(200);
    expect((await call(a, "GET", "/ready")).status).toBe(200);
    expect((await call(a, "GET", "/api/v1/ready")).status).toBe(200);
    expect((await call(a, "GET", "/api/v1/healthz")).status).toBe(200);
  });

  test("every other endpoint refuses a missing, wrong, differently-cased or padded token with 401 and WWW-Authenticate", async () => {
    const routes: Array<[string, string]> = [
      ["GET", "/status"], ["GET", "/status/ebpf"], ["GET", "/status/export"], ["GET", "/status/discovery"], ["GET", "/config"],
      ["GET", "/metrics"], ["GET", "/openapi.json"], ["GET", "/debug/vars"], ["GET", "/debug/pprof/"], ["POST", "/admin/reload"],
      ["POST", "/admin/flush"], ["GET", "/nope"],
    ];
    const bad: Array<Record<string, string>> = [
      // Trailing whitespace is not part of a field value (RFC 9110 5.5: HTTP strips it), so padding is tested inside the value.
      {}, bearer("wrong"), bearer(TOKEN.toUpperCase()), { authorization: `Bearer  ${TOKEN}` }, { authorization: `Bearer ${TOKEN} ${TOKEN}` },
      { authorization: `Bearer \t${TOKEN}` }, { authorization: `bearer${TOKEN}` },
      { authorization: `Basic ${TOKEN}` }, { authorization: TOKEN },
    ];
    for (const [method, path] of routes)
      for (const prefix of ["", "/api/v1"])
        for (const h of bad) {
          const r = await call(a, method, prefix + path, h);
          expect(r.headers.get("www-authenticate")).toStartWith("Bearer");
          const body = await expectError(r, 401, "unauthorized");
          expect(JSON.stringify(body)).not.toContain(TOKEN);
        }
  });

  test("the right token opens everything", async () => {
    for (const p of ["/status", "/config", "/metrics", "/openapi.json", "/debug/vars"]) expect((await call(a, "GET", p, bearer(TOKEN))).status).toBe(200);
    expect((await call(a, "POST", "/admin/flush", bearer(TOKEN))).status).toBe(200);
  });

  test("the scheme is case-insensitive (RFC 7235): bearer and BEARER work like Bearer", async () => {
    for (const scheme of ["bearer", "BEARER", "bEARER"]) {
      expect((await call(a, "GET", "/status", { authorization: `${scheme} ${TOKEN}` })).status).toBe(200);
      expect((await call(a, "POST", "/admin/flush", { authorization: `${scheme} ${TOKEN}` })).status).toBe(200);
      await expectError(await call(a, "POST", "/admin/flush", { authorization: `${scheme} ${READER}` }), 403, "forbidden");
    }
  });

  test("a read-only token reads but gets 403 forbidden on /admin and /debug", async () => {
    expect((await call(a, "GET", "/status", bearer(READER))).status).toBe(200);
    expect((await call(a, "GET", "/metrics", bearer(READER))).status).toBe(200);
    for (const [m, p] of [["POST", "/admin/reload"], ["POST", "/admin/flush"], ["GET", "/debug/vars"], ["GET", "/api/v1/debug/pprof/"], ["POST", "/api/v1/admin/flush"]] as const)
      await expectError(await call(a, m, p, bearer(READER)), 403, "forbidden");
  });

  test("/config never shows the token", async () => {
    const text = await (await call(a, "GET", "/config", bearer(TOKEN))).text();
    expect(text).not.toContain(TOKEN);
    expect(text).not.toContain(READER);
    expect(JSON.parse(text).self_telemetry.auth.bearer_token).toBe("[REDACTED]");
  });

  test("no log line carries the token", async () => {
    a.agent.logger.error(`something mentioning ${TOKEN}`);
    expect(JSON.stringify(a.logs)).not.toContain(TOKEN);
  });
});

describe("rate limiting", () => {
  test("beyond requests_per_second: 429 with Retry-After: 1 and the error object; probes exempt", async () => {
    const a = await inProcessAgent(QUIET_CONFIG.replace("self_telemetry:\n", "self_telemetry:\n  rate_limit:\n    enabled: true\n    requests_per_second: 5\n"));
    const statuses: number[] = [];
    let limited: Response | undefined;
    for (let i = 0; i < 20; i++) {
      const r = await call(a, "GET", "/status");
      statuses.push(r.status);
      if (r.status === 429) limited ??= r;
    }
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(5);
    expect(statuses.filter((s) => s === 200).length).toBeLessThanOrEqual(6);
    expect(limited!.headers.get("retry-after")).toBe("1");
    await expectError(limited!, 429, "service_unavailable");
    for (let i = 0; i < 20; i++) expect((await call(a, "GET", "/healthz")).status).toBe(200);
  });
});

describe("CORS", () => {
  const CORS_CONFIG = QUIET_CONFIG.replace(
    "self_telemetry:\n",
    "self_telemetry:\n  cors:\n    enabled: true\n    allowed_origins: [https://ui.example]\n  auth:\n    enabled: true\n    bearer_token: abc\n",
  );
  test("allowed origins get Access-Control-Allow-Origin, others none", async () => {
    const a = await inProcessAgent(CORS_CONFIG);
    const ok = await call(a, "GET", "/healthz", { origin: "https://ui.example" });
    expect(ok.headers.get("access-control-allow-origin")).toBe("https://ui.example");
    const denied = await call(a, "GET", "/healthz", { origin: "https://evil.example" });
    expect(denied.headers.get("access-control-allow-origin")).toBeNull();
  });

  test("a preflight answers without a token", async () => {
    const a = await inProcessAgent(CORS_CONFIG);
    const r = await a.request("/status", {
      method: "OPTIONS",
      headers: { origin: "https://ui.example", "access-control-request-method": "GET", "access-control-request-headers": "authorization" },
    });
    expect(r.status).toBeLessThan(300);
    expect(r.headers.get("access-control-allow-origin")).toBe("https://ui.example");
    expect((r.headers.get("access-control-allow-headers") ?? "").toLowerCase()).toContain("authorization");
  });

  test("unknown paths are 404 and wrong methods 405 with CORS on, as with it off (OPTIONS added to Allow)", async () => {
    const a = await inProcessAgent(CORS_CONFIG);
    const auth = { authorization: "Bearer abc", origin: "https://ui.example" };
    for (const p of ["/nope", "/api/v1/nope", "/status/nope"]) {
      const r = await call(a, "GET", p, auth);
      expect(r.headers.get("allow")).toBeNull();
      await expectError(r, 404, "not_found");
      await expectError(await call(a, "POST", p, auth), 404, "not_found");
    }
    const r = await call(a, "DELETE", "/status", auth);
    expect(r.headers.get("allow")).toBe("GET, OPTIONS");
    await expectError(r, 405, "invalid_request");
    expect(r.headers.get("access-control-allow-origin")).toBe("https://ui.example");
  });

  test("every error answer to an allowed origin carries the CORS headers: 401, 403, 404, 405, 413, 429", async () => {
    const a = await inProcessAgent(
      CORS_CONFIG.replace("    bearer_token: abc\n", "    bearer_token: abc\n    read_only_tokens: [ro]\n  rate_limit:\n    enabled: true\n    requests_per_second: 3\n"),
    );
    const origin = { origin: "https://ui.example" };
    const answers: Array<[number, Response]> = [
      [401, await call(a, "GET", "/status", origin)],
      [403, await call(a, "POST", "/admin/flush", { ...origin, authorization: "Bearer ro" })],
      [404, await call(a, "GET", "/nope", { ...origin, authorization: "Bearer abc" })],
    ];
    let limited: Response | undefined;
    for (let i = 0; i < 10 && !limited; i++) {
      const r = await call(a, "GET", "/status", { ...origin, authorization: "Bearer abc" });
      if (r.status === 429) limited = r;
    }
    answers.push([429, limited!]);
    for (const [status, r] of answers) {
      expect(r.status).toBe(status);
      expect(r.headers.get("access-control-allow-origin")).toBe("https://ui.example");
      expect(r.headers.get("access-control-allow-credentials")).toBe("true");
      expect((r.headers.get("access-control-expose-headers") ?? "").toLowerCase()).toContain("www-authenticate");
      expect((r.headers.get("access-control-expose-headers") ?? "").toLowerCase()).toContain("retry-after");
      expect(r.headers.get("vary")).toContain("Origin");
      await expectError(r, status, ((await r.clone().json()) as { error: string }).error);
    }
    // 405 and 413 on a fresh agent (the rate limit above is spent).
    const b = await inProcessAgent(CORS_CONFIG);
    const wrong = await call(b, "PUT", "/status", { ...origin, authorization: "Bearer abc" });
    const big = await call(b, "POST", "/admin/flush", { ...origin, authorization: "Bearer abc", "content-length": String(2 * 1024 * 1024) }, "x".repeat(2 * 1024 * 1024));
    for (const [status, r] of [[405, wrong], [413, big]] as const) {
      expect(r.status).toBe(status);
      expect(r.headers.get("access-control-allow-origin")).toBe("https://ui.example");
    }
    // A denied origin gets none of them.
    const denied = await call(b, "GET", "/status", { origin: "https://evil.example" });
    expect(denied.status).toBe(401);
    expect(denied.headers.get("access-control-allow-origin")).toBeNull();
  });

  test('allowed_origins ["*"] answers "*" without Allow-Credentials (browsers refuse the pair)', async () => {
    const a = await inProcessAgent(CORS_CONFIG.replace("[https://ui.example]", '["*"]'));
    for (const r of [
      await call(a, "GET", "/healthz", { origin: "https://any.example" }),
      await call(a, "GET", "/status", { origin: "https://any.example" }),
      await a.request("/status", { method: "OPTIONS", headers: { origin: "https://any.example", "access-control-request-method": "GET" } }),
    ]) {
      expect(r.headers.get("access-control-allow-origin")).toBe("*");
      expect(r.headers.get("access-control-allow-credentials")).toBeNull();
    }
  });

  test("a preflight is answered 204 with methods, headers and max-age, and counts against the rate limit", async () => {
    const a = await inProcessAgent(CORS_CONFIG.replace("    bearer_token: abc\n", "    bearer_token: abc\n  rate_limit:\n    enabled: true\n    requests_per_second: 2\n"));
    const preflight = () =>
      a.request("/status", { method: "OPTIONS", headers: { origin: "https://ui.example", "access-control-request-method": "GET", "access-control-request-headers": "authorization" } });
    const r = await preflight();
    expect(r.status).toBe(204);
    expect(r.headers.get("access-control-allow-methods")).toBe("GET, POST, OPTIONS");
    expect(r.headers.get("access-control-max-age")).toBe("600");
    await preflight();
    const limited = await preflight();
    expect(limited.status).toBe(429);
    expect(limited.headers.get("access-control-allow-origin")).toBe("https://ui.example");
  });

  test("disabled means no CORS headers at all", async () => {
    const r = await call(plain, "GET", "/healthz", { origin: "https://ui.example" });
    expect([...r.headers.keys()].filter((k) => k.startsWith("access-control"))).toEqual([]);
  });
});

describe("debug mode", () => {
  test("/debug/vars serves cmdline and integer memstats", async () => {
    const a = await inProcessAgent(QUIET_CONFIG.replace("self_telemetry:\n", "self_telemetry:\n  debug:\n    enabled: true\n"));
    const body = await json(await call(a, "GET", "/debug/vars"));
    expect(Array.isArray(body.cmdline)).toBe(true);
    for (const k of ["Alloc", "TotalAlloc", "Sys", "NumGC"]) expect(Number.isInteger(body.memstats[k])).toBe(true);
  });

  test("a malformed query is 400 invalid_request", async () => {
    const a = await inProcessAgent(QUIET_CONFIG.replace("self_telemetry:\n", "self_telemetry:\n  debug:\n    enabled: true\n"));
    await expectError(await call(a, "GET", "/debug/pprof/profile?seconds=abc"), 400, "invalid_request");
    await expectError(await call(a, "GET", "/debug/pprof/nonsense"), 400, "invalid_request");
  });
});
