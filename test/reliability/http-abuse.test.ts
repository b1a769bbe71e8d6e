/**
 * HTTP abuse against the compiled agent over real sockets: bad methods, bad paths, odd Host headers, huge
 * headers and bodies, slow clients trickling bytes, many idle connections, invalid UTF-8, path traversal in
 * /debug, and property-based fuzzing (fast-check) of requests generated from the agent's own OpenAPI document.
 * Throughout: the process stays up, /healthz answers 200 (sampled every 50 ms by a watcher), no 5xx except
 * the documented ones, and every error answered by the application is the standard {error,message,details}.
 *
 * Answers Bun's HTTP parser gives before the application sees a request carry no body, by design of the
 * runtime: 400 for a request line that is not HTTP, 431 for headers over its limit, 413 for a Content-Length
 * over self_telemetry.max_body_bytes, and a closed connection for an unknown method token. The tests assert
 * exactly those statuses for them.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { spawnAgent, type AgentProcess } from "../helpers/agent-process";
import { OpenApiChecker } from "../helpers/openapi";
import { waitUntil } from "../helpers/wait";
import { fdCount, rssKiB } from "./lib/agent-config";
import { openSocket, rawRequest, requestText, type RawAnswer } from "./lib/raw-http";
import { quietConfig } from "../helpers/quiet-config";

const MAX_BODY_BYTES = 65_536;
const IDLE_CONNECTIONS = 400;
const FUZZ_RUNS = 400;
/** Statuses the document declares as designed 5xx: /ready and /healthz 503, debug 503 (a profile already running). */
const DESIGNED_5XX = new Set([503]);

let agent: AgentProcess;
let watcher: { stop(): Promise<{ ok: number; bad: Array<string> }> };

/** Polls /healthz every 50 ms until stopped; every answer must be 200. */
function watchLiveness(url: string) {
  let stopped = false;
  let ok = 0;
  const bad: string[] = [];
  const loop = (async () => {
    while (!stopped) {
      try {
        const r = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(5000) });
        if (r.status === 200) ok++;
        else bad.push(`status ${r.status}`);
        await r.arrayBuffer();
      } catch (e) {
        bad.push((e as Error).message);
      }
      await Bun.sleep(50);
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return { ok, bad };
    },
  };
}

function expectErrorObject(a: RawAnswer | { status: number; body: string }, what: string): void {
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(a.body) as Record<string, unknown>;
  } catch {
    throw new Error(`${what}: answer ${a.status} is not JSON: ${JSON.stringify(a.body.slice(0, 200))}`);
  }
  expect(Object.keys(body).sort(), what).toEqual(["details", "error", "message"]);
  expect(typeof body.error, what).toBe("string");
  expect(typeof body.message, what).toBe("string");
  expect(typeof body.details, what).toBe("object");
}

beforeAll(async () => {
  agent = await spawnAgent({
    config: quietConfig({ selfTelemetry: `  max_body_bytes: ${MAX_BODY_BYTES}\n  debug:\n    enabled: true` }),
  });
  watcher = watchLiveness(agent.url);
});

afterAll(async () => {
  const w = await watcher.stop();
  expect(agent.proc.exitCode).toBeNull();
  expect(w.bad).toEqual([]);
  expect(w.ok).toBeGreaterThan(10);
  expect(await agent.stop()).toBe(0);
});

describe("malformed requests over a socket", () => {
  test("methods a route does not serve: 405 with Allow and the error object, on every documented path", async () => {
    const doc = (await (await fetch(`${agent.url}/openapi.json`)).json()) as { paths: Record<string, Record<string, unknown>> };
    for (const [template, ops] of Object.entries(doc.paths)) {
      const path = template.replace("{profile}", "heap");
      for (const method of ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]) {
        if (method.toLowerCase() in ops) continue;
        const a = await rawRequest(agent.url, requestText(method, path));
        expect(a.status, `${method} ${path}`).toBe(405);
        expect(a.headers.allow, `${method} ${path}`).toBe(Object.keys(ops).map((m) => m.toUpperCase()).sort().join(", "));
        expectErrorObject(a, `${method} ${path}`);
      }
    }
  });

  test("unknown method tokens and request lines that are not HTTP: refused by the parser, no crash", async () => {
    for (const line of ["FOO /healthz HTTP/1.1", "GET", "\x00\x01\x02 garbage", "GET /healthz HTTP/9.9", "GET  /healthz  HTTP/1.1", "OPTIONS * HTTP/1.1"]) {
      const a = await rawRequest(agent.url, `${line}\r\nHost: x\r\nConnection: close\r\n\r\n`, { timeoutMs: 3000 });
      expect([0, 400, 404, 405, 505], JSON.stringify(line)).toContain(a.status);
      if (a.status === 404 || a.status === 405) expectErrorObject(a, line);
    }
  });

  test("bad paths: unknown, very long, encoded, null bytes: 404 (or 414) with the error object", async () => {
    const paths = ["/nope", "/status/", "//status", "/status//export", "/api/v2/status", "/api/v1", "/" + "a".repeat(8000), "/status%00", "/%2e%2e/config", "/status/%ZZ", "/metrics/../../x"];
    for (const p of paths) {
      const a = await rawRequest(agent.url, requestText("GET", p));
      expect([200, 404, 414, 431], p.slice(0, 40)).toContain(a.status);
      if (a.status === 404) expectErrorObject(a, p.slice(0, 40));
    }
  });

  test("any Host header routes the real path (regression: a short Host made Elysia route a different path than the guard checked)", async () => {
    for (const host of ["x", "ab", "abc", "", "a.b", "[::1]", "very-long-host-name.example:12345"]) {
      const ok = await rawRequest(agent.url, requestText("GET", "/status", { host }));
      expect(ok.status, `Host: ${host}`).toBe(200);
      const shifted = await rawRequest(agent.url, requestText("POST", "/xx/admin/reload", { host }));
      expect(shifted.status, `Host: ${host}`).toBe(404);
      expectErrorObject(shifted, `Host: ${host}`);
      expect(JSON.parse(shifted.body).details.path, `Host: ${host}`).toBe("/xx/admin/reload");
      const nope = await rawRequest(agent.url, requestText("GET", "/nope", { host }));
      expect(nope.status, `Host: ${host}`).toBe(404);
      expectErrorObject(nope, `Host: ${host}`);
    }
  });

  test("huge headers: 431 from the parser; a header just under the limit still answers", async () => {
    const big = await rawRequest(agent.url, requestText("GET", "/status", { "x-big": "a".repeat(200_000) }));
    expect(big.status).toBe(431);
    const many: Record<string, string> = {};
    for (let i = 0; i < 2000; i++) many[`x-h${i}`] = "v".repeat(50);
    const lots = await rawRequest(agent.url, requestText("GET", "/status", many));
    expect([200, 431]).toContain(lots.status);
    const fine = await rawRequest(agent.url, requestText("GET", "/status", { "x-medium": "a".repeat(4000) }));
    expect(fine.status).toBe(200);
  });

  test("huge bodies: 413 for a Content-Length beyond max_body_bytes, chunked floods cut, memory bounded", async () => {
    const before = rssKiB(agent.proc.pid);
    const declared = await rawRequest(agent.url, `POST /admin/flush HTTP/1.1\r\nHost: x\r\nContent-Length: ${MAX_BODY_BYTES * 100}\r\nConnection: close\r\n\r\n${"x".repeat(MAX_BODY_BYTES * 2)}`);
    expect(declared.status).toBe(413);
    const chunk = "x".repeat(0x10000);
    const chunked = await rawRequest(
      agent.url,
      `POST /admin/flush HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${`10000\r\n${chunk}\r\n`.repeat(64)}0\r\n\r\n`,
    );
    expect([200, 413]).toContain(chunked.status);
    if (chunked.status === 200) expect(JSON.parse(chunked.body).status).toBeDefined();
    // A 4 MiB body must not have been buffered many times over (the limit is 64 KiB).
    expect(rssKiB(agent.proc.pid) - before).toBeLessThan(64 * 1024);
    const within = await rawRequest(agent.url, requestText("GET", "/status", {}, "y".repeat(MAX_BODY_BYTES - 1)));
    expect(within.status).toBe(200);
  });

  test("invalid UTF-8 in path, query and header values: 404/200/401 answers, never a 5xx", async () => {
    const bad = Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xe2, 0x82]);
    const cases = [
      Buffer.concat([Buffer.from("GET /status/"), bad, Buffer.from(" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")]),
      Buffer.concat([Buffer.from("GET /status?x="), bad, Buffer.from(" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")]),
      Buffer.concat([Buffer.from("GET /status HTTP/1.1\r\nHost: x\r\nX-Bad: "), bad, Buffer.from("\r\nConnection: close\r\n\r\n")]),
      Buffer.concat([Buffer.from("GET /status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "), bad, Buffer.from("\r\nConnection: close\r\n\r\n")]),
      Buffer.from("GET /status/%C3%28%FF HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
      Buffer.from("GET /debug/pprof/heap?seconds=%FF%FE HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    ];
    for (const c of cases) {
      const a = await rawRequest(agent.url, c);
      expect(a.status, c.toString("latin1").split("\r\n")[0]).toBeGreaterThanOrEqual(200);
      expect(a.status, c.toString("latin1").split("\r\n")[0]).toBeLessThan(500);
      if (a.status >= 400 && a.status !== 400) expectErrorObject(a, c.toString("latin1").split("\r\n")[0]!);
    }
  });

  test("path traversal in /debug never reaches a file or another route's guard decision", async () => {
    const paths = [
      "/debug/../config",
      "/debug/pprof/../../config",
      "/debug/pprof/..%2f..%2fconfig",
      "/debug/pprof/%2e%2e/%2e%2e/etc/passwd",
      "/debug/pprof/../../../../etc/passwd",
      "/debug/logs/../../../etc/passwd",
      "/debug/pprof/..\\..\\etc\\passwd",
      "/debug/pprof/heap/../../../../proc/self/environ",
      "/api/v1/debug/../../etc/shadow",
      "/debug/pprof/%252e%252e/config",
    ];
    for (const p of paths) {
      const a = await rawRequest(agent.url, requestText("GET", p));
      expect(a.body, p).not.toContain("root:");
      expect(a.body, p).not.toContain("PATH=");
      expect(a.status, p).toBeLessThan(500);
      if (a.status >= 400) expectErrorObject(a, p);
    }
  });
});

describe("slow and idle clients", () => {
  test("a client trickling its request a byte at a time does not hold up others; it is answered or cut, no crash", async () => {
    const s = await openSocket(agent.url);
    const text = requestText("GET", "/status");
    let answer = "";
    s.on("data", (d) => (answer += d.toString("latin1")));
    s.on("error", () => {});
    const closed = new Promise<void>((r) => s.on("close", () => r()));
    for (let i = 0; i < text.length; i++) {
      if (s.destroyed) break;
      s.write(text[i]!);
      if (i % 8 === 0) {
        const r = await fetch(`${agent.url}/healthz`);
        expect(r.status).toBe(200);
      }
      await Bun.sleep(10);
    }
    await waitUntil(() => answer.includes("\r\n\r\n") || s.destroyed, { what: "the trickled request answered" });
    expect(answer.startsWith("HTTP/1.1 200")).toBe(true);
    s.destroy();
    await closed;
  });

  test(`${IDLE_CONNECTIONS} idle connections (half with a partial request line): probes answer, fds come back`, async () => {
    const fdsBefore = fdCount(agent.proc.pid);
    const sockets = [];
    for (let i = 0; i < IDLE_CONNECTIONS; i++) {
      const s = await openSocket(agent.url);
      s.on("error", () => {});
      if (i % 2) s.write("GET /sta");
      sockets.push(s);
    }
    await waitUntil(() => fdCount(agent.proc.pid) >= fdsBefore + IDLE_CONNECTIONS * 0.9, { what: "the agent to hold the connections" });
    for (let i = 0; i < 20; i++) expect((await fetch(`${agent.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${agent.url}/status`)).status).toBe(200);
    for (const s of sockets) s.destroy();
    await waitUntil(() => fdCount(agent.proc.pid) <= fdsBefore + 5, { what: "the agent to release the connections", timeoutMs: 15_000 });
  });
});

describe("property-based fuzzing over the OpenAPI document", () => {
  test(`${FUZZ_RUNS} generated requests: documented statuses only, no undesigned 5xx, the error object on every error`, async () => {
    const doc = (await (await fetch(`${agent.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, { parameters?: Array<{ name: string; in: string; schema?: { enum?: string[] } }> }>>;
    };
    const checker = new OpenApiChecker(doc);
    const templates = Object.keys(doc.paths);
    const anyString = fc.oneof(fc.string({ maxLength: 40 }), fc.string({ unit: "binary", maxLength: 20 }), fc.constantFrom("", "..", "%00", "%ff", "-1", "1e309", "NaN"));
    const seconds = fc.oneof(fc.constantFrom("0", "1", "-5", "abc", "99999999999", "1.5", ""), fc.integer({ min: -10, max: 2 }).map(String));
    const request = fc.record({
      template: fc.constantFrom(...templates),
      method: fc.constantFrom("GET", "GET", "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"),
      // profile and trace sample for ?seconds (slow by design) and are not generated; seconds values stay <= 2.
      profile: fc.oneof(fc.constantFrom("heap", "allocs", "goroutine", "threadcreate", "block", "mutex"), anyString),
      query: fc.array(fc.tuple(fc.oneof(fc.constantFrom("seconds", "debug", "gc", "snapshot", "format"), fc.string({ maxLength: 10 })), fc.oneof(seconds, anyString)), {
        maxLength: 3,
      }),
      body: fc.oneof(fc.constant(undefined), fc.json({ maxDepth: 2 }), fc.string({ maxLength: 200 })),
      contentType: fc.constantFrom(undefined, "application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"),
    });
    const problems: string[] = [];
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        let path = r.template.replace("{profile}", encodeURIComponent(r.profile));
        const qs = r.query.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join("&");
        if (qs) path += `?${qs}`;
        const withBody = r.body !== undefined && r.method !== "GET" && r.method !== "HEAD";
        const res = await fetch(`${agent.url}${path}`, {
          method: r.method,
          headers: r.contentType ? { "content-type": r.contentType } : {},
          ...(withBody ? { body: r.body } : {}),
        });
        const what = `${r.method} ${path}`;
        if (res.status >= 500 && !DESIGNED_5XX.has(res.status)) problems.push(`${what}: ${res.status}`);
        // /healthz and /ready answer 503 with their own documented body (checked against the document below).
        const probe = /^\/(api\/v1\/)?(healthz|ready)$/.test(path.split("?")[0]!) && res.status === 503;
        if (res.status >= 400 && r.method !== "HEAD" && !probe) {
          const text = await res.clone().text();
          try {
            const b = JSON.parse(text) as Record<string, unknown>;
            if (Object.keys(b).sort().join(",") !== "details,error,message") problems.push(`${what}: ${res.status} body ${text.slice(0, 100)}`);
          } catch {
            problems.push(`${what}: ${res.status} not JSON: ${text.slice(0, 100)}`);
          }
        }
        const pathOnly = path.split("?")[0]!;
        if (checker.template(pathOnly) && r.method !== "HEAD" && res.status !== 405 && res.status !== 404)
          for (const p of await checker.check(r.method, pathOnly, res)) problems.push(p);
        await res.arrayBuffer();
        return true;
      }),
      { numRuns: FUZZ_RUNS, seed: Number(process.env.FUZZ_SEED ?? 0x5eed) },
    );
    expect(problems).toEqual([]);
    expect(agent.proc.exitCode).toBeNull();
  }, 120_000);
});
