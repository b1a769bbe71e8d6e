/**
 * /debug/* of the compiled binary started with --debug, read by the real tools: `go tool pprof -top` fetches and
 * reads profile, heap, goroutine, threadcreate, block and mutex live; the CPU profile of a busy agent names the
 * agent's own functions (with their src/ files); the trace is Chrome trace-event JSON; one CPU profile at a time.
 * Gating over a socket: 404 without debug mode, 401 without the token when auth is on.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { QUIET_CONFIG, spawnAgent, type AgentProcess } from "../helpers/agent-process";
import { waitUntil } from "../helpers/wait";

const TOKEN = "debug-e2e-token-7Hq2";
const dir = mkdtempSync(join(tmpdir(), "svc-agent-debug-e2e-"));
let agent: AgentProcess;

async function spawnWith(config: string, debug: boolean): Promise<AgentProcess> {
  const path = join(dir, `config-${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(path, config);
  return spawnAgent({ args: ["--config", path, ...(debug ? ["--debug"] : [])] });
}

/** Runs `go tool pprof` with its fetch cache in our temp dir; returns exit code and output. */
async function pprof(...args: string[]): Promise<{ code: number; out: string }> {
  const p = Bun.spawn(["go", "tool", "pprof", ...args], { stdout: "pipe", stderr: "pipe", env: { ...process.env, PPROF_TMPDIR: dir, HOME: dir } });
  const [out, err] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text()]);
  return { code: await p.exited, out: out + err };
}

/** Keeps the agent busy with requests until `stop` resolves. */
async function load(url: string, stop: Promise<unknown>): Promise<number> {
  let done = false;
  void stop.then(() => (done = true));
  let n = 0;
  const worker = async () => {
    while (!done) {
      for (const p of ["/status", "/metrics", "/config", "/status/export", "/ready"]) {
        await (await fetch(url + p)).arrayBuffer();
        n++;
      }
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  return n;
}

beforeAll(async () => {
  agent = await spawnWith(QUIET_CONFIG, true);
});
afterAll(async () => {
  await agent?.stop();
});

describe("go tool pprof reads the live profiles", () => {
  for (const [profile, type] of [
    ["heap", "inuse_objects"],
    ["goroutine", "goroutine"],
    ["threadcreate", "threadcreate"],
    ["block", "delay"],
    ["mutex", "delay"],
  ] as const) {
    test(`${profile}`, async () => {
      const r = await pprof("-top", `${agent.url}/debug/pprof/${profile}`);
      expect(r.code).toBe(0);
      expect(r.out).toContain(`Type: ${type}`);
      if (profile === "goroutine") expect(r.out).toContain("main event loop");
      if (profile === "threadcreate") expect(r.out).toMatch(/Showing nodes accounting for [1-9]\d*, 100% of/);
      if (profile === "heap") expect(r.out).toMatch(/Object|Structure|Function/);
      if (profile === "mutex") expect(r.out).toContain("reload lock");
    }, 30_000);
  }

  test("heap?snapshot=1: sizes per object type from a heap snapshot", async () => {
    const r = await pprof("-top", `${agent.url}/debug/pprof/heap?snapshot=1`);
    expect(r.code).toBe(0);
    expect(r.out).toContain("Type: inuse_space");
    expect(r.out).toMatch(/\d+(\.\d+)?[kM]B .*(Object|Structure|Function|string)/);
  }, 60_000);

  test("block: the event-loop block of the heap snapshot is attributed to its request", async () => {
    const r = await pprof("-top", `${agent.url}/debug/pprof/block`);
    expect(r.code).toBe(0);
    expect(r.out).toContain("http GET /debug/pprof/heap");
    expect(r.out).toMatch(/event-loop delay since .* samples\): min/);
  }, 30_000);

  test("profile of a busy agent shows the agent's own functions by name, file and line", async () => {
    const stop = Promise.withResolvers<void>();
    const busy = load(agent.url, stop.promise);
    const r = await pprof("-top", "-lines", "-nodecount=300", `${agent.url}/debug/pprof/profile?seconds=3`);
    stop.resolve();
    const requests = await busy;
    expect(r.code).toBe(0);
    expect(r.out).toContain("Type: cpu");
    // Lines such as "  11ms  6.47%  6.47%  19ms 11.18%  #start src/telemetry/tasks.ts:59"
    const own = new Set<string>();
    for (const line of r.out.split("\n")) {
      const m = /%\s+(\S+) (src\/\S+\.ts):\d+$/.exec(line.trim());
      if (m) own.add(`${m[1]} ${m[2]}`);
    }
    console.log(`busy agent (${requests} requests during the profile): ${own.size} agent functions sampled, e.g. ${[...own].slice(0, 6).join(", ")}`);
    expect(own.size).toBeGreaterThanOrEqual(3);
  }, 60_000);

  test("a second CPU profile while one runs gets 503 service_unavailable", async () => {
    // Five seconds: time enough for the second to arrive while the first samples, on a loaded machine too.
    const first = fetch(`${agent.url}/debug/pprof/profile?seconds=5`);
    // The second is sent once the agent lists the first as an operation in flight: its handler has started, and the
    // profiler is taken as it starts. Sent at once, the second may reach the agent first (seen after the busy
    // profile above: the first refused, and every second one then sampling a whole second until the timeout).
    await waitUntil(async () => (await (await fetch(`${agent.url}/debug/pprof/goroutine?debug=2`)).text()).includes("\nhttp GET /debug/pprof/profile\n"), { what: "the first profile in flight", timeoutMs: 10_000 });
    const second = await fetch(`${agent.url}/debug/pprof/profile?seconds=1`);
    expect(second.status).toBe(503);
    const body = (await second.json()) as { error: string; details: { profile: string; busy_until: string } };
    expect(body.error).toBe("service_unavailable");
    expect(body.details.profile).toBe("profile");
    expect(second.headers.get("retry-after")).toMatch(/^\d+$/);
    expect((await first).status).toBe(200);
  }, 30_000);

  test("a profile longer than the server's 30 s idle timeout still answers", async () => {
    const r = await fetch(`${agent.url}/debug/pprof/profile?seconds=32`);
    expect(r.status).toBe(200);
    expect((await r.arrayBuffer()).byteLength).toBeGreaterThan(0);
  }, 60_000);

  test("seconds out of bounds is 400", async () => {
    expect((await fetch(`${agent.url}/debug/pprof/profile?seconds=0`)).status).toBe(400);
    expect((await fetch(`${agent.url}/debug/pprof/profile?seconds=301`)).status).toBe(400);
  });
});

describe("text forms, trace, vars, index", () => {
  test("goroutine?debug=1 counts and ?debug=2 stacks", async () => {
    const counts = await (await fetch(`${agent.url}/debug/pprof/goroutine?debug=1`)).text();
    expect(counts).toMatch(/^goroutine profile: total \d+/);
    const stacks = await (await fetch(`${agent.url}/debug/pprof/goroutine?debug=2`)).text();
    expect(stacks).toContain("main event loop");
    expect(stacks).toMatch(/goroutine \d+ \[operation, \d+ seconds\]:\nhttp GET \/debug\/pprof\/goroutine/);
  });

  test("trace?seconds=1 is gzip Chrome trace-event JSON with the operations of that second", async () => {
    const pending = fetch(`${agent.url}/debug/pprof/trace?seconds=1`);
    const stop = Promise.withResolvers<void>();
    const busy = load(agent.url, stop.promise);
    const res = await pending;
    stop.resolve();
    await busy;
    expect(res.status).toBe(200);
    const doc = JSON.parse(gunzipSync(Buffer.from(await res.arrayBuffer())).toString()) as { traceEvents: Array<{ name: string; ph: string; ts: number; id?: string }> };
    const begins = doc.traceEvents.filter((e) => e.ph === "b" && e.name === "http GET /status");
    expect(begins.length).toBeGreaterThan(0);
    const ends = new Set(doc.traceEvents.filter((e) => e.ph === "e").map((e) => e.id));
    expect(begins.some((b) => ends.has(b.id))).toBe(true);
    for (const e of doc.traceEvents) expect(Number.isFinite(e.ts)).toBe(true);
  }, 30_000);

  test("/debug/vars: cmdline and integer memstats, NumGC measured", async () => {
    await (await fetch(`${agent.url}/debug/pprof/heap?gc=1`)).arrayBuffer();
    const v = (await (await fetch(`${agent.url}/debug/vars`)).json()) as { cmdline: string[]; memstats: Record<string, number>; counters: Record<string, number> };
    expect(v.cmdline).toContain("--debug");
    for (const k of ["Alloc", "TotalAlloc", "Sys", "NumGC"]) expect(Number.isInteger(v.memstats[k])).toBe(true);
    expect(v.memstats.NumGC).toBeGreaterThanOrEqual(1);
    expect(v.memstats.TotalAlloc).toBeGreaterThan(0);
    expect(Object.keys(v.counters).length).toBeGreaterThan(0);
  });

  test("index page links every profile", async () => {
    const html = await (await fetch(`${agent.url}/debug/pprof/`)).text();
    for (const p of ["profile", "heap", "goroutine", "threadcreate", "block", "mutex", "trace"]) expect(html).toContain(`href="${p}`);
  });
});

describe("gating", () => {
  test("404 without debug mode", async () => {
    const plain = await spawnWith(QUIET_CONFIG, false);
    try {
      for (const p of ["/debug/pprof/", "/debug/pprof/heap", "/debug/vars"]) {
        const r = await fetch(plain.url + p);
        expect(r.status).toBe(404);
        expect(((await r.json()) as { error: string }).error).toBe("not_found");
      }
    } finally {
      await plain.stop();
    }
  }, 30_000);

  test("401 without the token when auth is on, 200 with it", async () => {
    const config = QUIET_CONFIG.replace("self_telemetry:\n", `self_telemetry:\n  auth:\n    enabled: true\n    bearer_token: ${TOKEN}\n`);
    const authed = await spawnWith(config, true);
    try {
      for (const p of ["/debug/pprof/", "/debug/pprof/heap", "/debug/vars"]) {
        const r = await fetch(authed.url + p);
        expect(r.status).toBe(401);
        expect(((await r.json()) as { error: string }).error).toBe("unauthorized");
        expect((await fetch(authed.url + p, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200);
      }
    } finally {
      await authed.stop();
    }
  }, 30_000);
});
