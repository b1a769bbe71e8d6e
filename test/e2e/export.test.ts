/**
 * e2e: the compiled binary as both ends. `dist/svc-agent receive` listens on port 0 and writes JSON lines; an
 * agent tails a log file and exports to it; the lines arrive as OTLP log records, /ready's otlp check and
 * /status/export say so. An agent whose backend is absent is not ready, with the reason.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { appendFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { BINARY, closedLoopbackPort, QUIET_CONFIG, quietConfig, spawnAgent, type AgentProcess } from "../helpers";
import { waitUntil } from "../helpers/wait";

const LINES = 25;
let dir = "";
let receiver: Subprocess<"ignore", "pipe", "pipe">;
let receiverOut = "";
let endpoint = "";
let agent: AgentProcess;

async function startReceiver(output: string): Promise<string> {
  receiver = Bun.spawn([BINARY, "receive", "--listen", "127.0.0.1:0", "--output", output], { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  void (async () => {
    for await (const chunk of receiver.stdout) receiverOut += new TextDecoder().decode(chunk);
  })();
  const line = await waitUntil(() => /listening on (127\.0\.0\.1:\d+)/.exec(receiverOut), { what: "receiver to listen" });
  return line[1]!;
}

function records(output: string): Array<Record<string, any>> {
  if (!existsSync(output)) return [];
  return readFileSync(output, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "svc-export-e2e-"));
  endpoint = await startReceiver(join(dir, "received.jsonl"));
  writeFileSync(join(dir, "app.log"), "");
  agent = await spawnAgent({
    config: quietConfig({
      endpoint,
      otlp: "  compression: gzip\n  headers:\n    x-api-key: e2e-secret",
      extra: "service_name: e2e-export\nbackoff:\n  initial: 50ms\n  max: 500ms",
      agent: `  logs:\n    enabled: true\n    include: ["${join(dir, "*.log")}"]\n    format: raw\n    checkpoint_file: ${join(dir, "checkpoint.json")}\n    poll_interval: 50ms`,
    }),
  });
});

afterAll(async () => {
  await agent?.stop();
  receiver?.kill("SIGTERM");
  await receiver?.exited;
});

describe("agent -> svc-agent receive", () => {
  test("/ready's otlp check is ok and /status/export reports the backend", async () => {
    const ready = await waitUntil(async () => {
      const body = (await (await fetch(`${agent.url}/ready`)).json()) as { checks: Record<string, string> };
      return body.checks.otlp === "ok" ? body : undefined;
    }, { what: "otlp ready" });
    expect(ready.checks.otlp).toBe("ok");
    const view = (await (await fetch(`${agent.url}/status/export`)).json()) as Record<string, any>;
    expect(view).toMatchObject({ endpoint, protocol: "grpc", tls: false, compression: "gzip", last_error: null });
  });

  test("log lines written to a tailed file arrive at the receiver as OTLP log records, with the headers", async () => {
    const output = join(dir, "received.jsonl");
    for (let i = 0; i < LINES; i++) appendFileSync(join(dir, "app.log"), `e2e line ${i}\n`);
    const flush = await fetch(`${agent.url}/admin/flush`, { method: "POST" });
    expect(flush.status).toBe(200);
    const got = await waitUntil(() => {
      const bodies = records(output)
        .filter((r) => r.signal === "logs")
        .flatMap((r) => r.request.resourceLogs.flatMap((rl: any) => rl.scopeLogs.flatMap((sl: any) => sl.logRecords.map((lr: any) => lr.body.stringValue))));
      return bodies.length >= LINES ? bodies : undefined;
    }, { what: `${LINES} log records at the receiver`, timeoutMs: 20_000 });
    expect(got.slice(0, LINES)).toEqual(Array.from({ length: LINES }, (_, i) => `e2e line ${i}`));
    const first = records(output).find((r) => r.signal === "logs")!;
    expect(first.encoding).toBe("gzip");
    expect(first.metadata["x-api-key"]).toBe("e2e-secret");
    const resource = Object.fromEntries(first.request.resourceLogs[0].resource.attributes.map((a: any) => [a.key, a.value.stringValue]));
    // A host file no workload is known for: not exported as the agent itself (its service_name is e2e-export).
    expect(resource["service.name"]).toBe("unknown_service");
    expect(resource["host.name"]).toBeString();
    expect(receiverOut).toMatch(/ logs \d+ log_records resources=1 scopes=1 bytes=\d+ encoding=gzip peer=/);
    // The receiver writes what it received before it answers; the agent counts an export once the answer is back.
    const view = await waitUntil(async () => {
      const v = (await (await fetch(`${agent.url}/status/export`)).json()) as Record<string, any>;
      return v.queues.logs.exported >= LINES ? v : undefined;
    }, { what: "the agent counting the log records exported", timeoutMs: 10_000 });
    expect(view.queues.logs.exported).toBeGreaterThanOrEqual(LINES);
    expect(view.connected).toBe(true);
    const metrics = await (await fetch(`${agent.url}/metrics`)).text();
    expect(metrics).toMatch(/_logs_exported_total \d+/);
    expect(metrics).toMatch(/_export_latency_seconds_count\{signal="logs"\} [1-9]/);
  });
});

test("an agent whose backend is absent is not ready: otlp failed: connection refused", async () => {
  const port = closedLoopbackPort();
  const lonely = await spawnAgent({ config: `${QUIET_CONFIG}backoff:\n  initial: 50ms\n  max: 200ms\n`, env: { OTLP_ENDPOINT: `127.0.0.1:${port}` } });
  try {
    const body = await waitUntil(async () => {
      const r = await fetch(`${lonely.url}/ready`);
      const b = (await r.json()) as { status: string; checks: Record<string, string> };
      return r.status === 503 && b.checks.otlp === "failed: connection refused" ? b : undefined;
    }, { what: "not ready with the reason" });
    expect(body.status).toBe("not_ready");
  } finally {
    await lonely.stop();
  }
});
