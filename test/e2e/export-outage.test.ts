/**
 * e2e: the compiled binary through a backend outage. An agent tails a log file and exports to a port where
 * nothing listens, so every batch fails and waits in retry backoff (backoff.initial 20s). POST /admin/flush then
 * answers `incomplete` with what remains and why; once `dist/svc-agent receive` listens there, a flush cuts the
 * backoff short and exports everything. SIGTERM with the backend just back gives the batches in backoff one last
 * attempt: all arrive, none is dropped as shutdown.
 */
import { afterEach, expect, test } from "bun:test";
import { appendFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { BINARY, closedLoopbackPort, QUIET_CONFIG, spawnAgent, type AgentProcess } from "../helpers";
import { waitUntil } from "../helpers/wait";

let dir = "";
let port = 0;
let agent: AgentProcess;
let receiver: Subprocess<"ignore", "pipe", "pipe"> | undefined;
let line = 0;
/** One output file per receiver run (a receiver truncates its file). */
const outputs: string[] = [];

async function startReceiver(): Promise<void> {
  let out = "";
  const output = join(dir, `received-${outputs.length}.jsonl`);
  outputs.push(output);
  const r = Bun.spawn([BINARY, "receive", "--listen", `127.0.0.1:${port}`, "--output", output], { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  receiver = r;
  void (async () => {
    for await (const chunk of r.stdout) out += new TextDecoder().decode(chunk);
  })();
  await waitUntil(() => out.includes("listening on"), { what: "the receiver to listen" });
}

async function stopReceiver(): Promise<void> {
  receiver?.kill("SIGTERM");
  await receiver?.exited;
  receiver = undefined;
}

/** Log record bodies the receivers wrote. */
function received(): string[] {
  return outputs
    .filter((f) => existsSync(f))
    .flatMap((f) => readFileSync(f, "utf8").split("\n"))
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, any>)
    .filter((r) => r.signal === "logs")
    .flatMap((r) => r.request.resourceLogs.flatMap((rl: any) => rl.scopeLogs.flatMap((sl: any) => sl.logRecords.map((lr: any) => lr.body.stringValue as string))));
}

/** The sum of the samples of `name` whose labels include `label` (e.g. `signal="logs"`). */
async function metric(name: string, label = ""): Promise<number> {
  const text = await (await fetch(`${agent.url}/metrics`)).text();
  let sum = 0;
  for (const l of text.split("\n")) {
    const m = /^(\w+)(\{[^}]*\})? (\S+)$/.exec(l);
    if (m && m[1] === `svc_${name}` && (m[2] ?? "").includes(label)) sum += Number(m[3]);
  }
  return sum;
}

async function writeLines(n: number): Promise<string[]> {
  const lines = Array.from({ length: n }, () => `outage line ${line++}`);
  appendFileSync(join(dir, "app.log"), lines.map((l) => l + "\n").join(""));
  return lines;
}

/** Waits until `n` more log records were collected and every batch of them failed once (queued: none). */
async function untilAllWaitInBackoff(collected: number, errorsBefore: number, batches: number): Promise<void> {
  await waitUntil(async () => (await metric("logs_collected_total")) === collected && (await metric("export_errors_total", 'signal="logs"')) >= errorsBefore + batches, {
    what: "every batch to fail once and wait in backoff",
    timeoutMs: 20_000,
  });
}

async function flush(): Promise<Record<string, any>> {
  const r = await fetch(`${agent.url}/admin/flush`, { method: "POST" });
  expect(r.status).toBe(200);
  return (await r.json()) as Record<string, any>;
}

/** A fresh agent (and log file, and receiver port) for one test. */
async function startAgent(): Promise<void> {
  dir = mkdtempSync(join(tmpdir(), "svc-export-outage-"));
  port = closedLoopbackPort();
  outputs.length = 0;
  writeFileSync(join(dir, "app.log"), "");
  const logs = `  logs:
    enabled: true
    include: ["${join(dir, "*.log")}"]
    format: raw
    checkpoint_file: ${join(dir, "checkpoint.json")}
    poll_interval: 50ms
`;
  const settings = "shutdown_timeout: 10s\nbackoff:\n  initial: 20s\n  max: 30s\nqueues:\n  logs:\n    batch_size: 10\n    batch_timeout: 50ms\n";
  agent = await spawnAgent({ config: QUIET_CONFIG.replace("\nagent:\n", `\nagent:\n${logs}`) + settings, env: { OTLP_ENDPOINT: `127.0.0.1:${port}` } });
}

afterEach(async () => {
  await agent?.stop();
  await stopReceiver();
});

test("flush during an outage is incomplete and says why; once the backend is back, a flush exports at once what waited in backoff", async () => {
  await startAgent();
  const first = await writeLines(30);
  await untilAllWaitInBackoff(30, 0, 3);
  const during = await flush();
  expect(during).toMatchObject({ status: "incomplete", flushed: { logs: 0 }, remaining: { logs: 30 }, reason: "export_failed" });
  expect(during.last_error).toStartWith("UNAVAILABLE: ");

  await startReceiver();
  // The batches wait 20 s for their next attempt (with jitter, at least 10 s): the flush makes it now.
  const after = await flush();
  expect(after).toEqual({
    status: "ok",
    flushed: { traces: 0, metrics: 0, logs: 30, profiles: 0 },
    dropped: { traces: 0, metrics: 0, logs: 0, profiles: 0 },
    remaining: { traces: 0, metrics: 0, logs: 0, profiles: 0 },
    reason: null,
    last_error: null,
  });
  // Batches are sent side by side (max_in_flight): compare as sets, each line once.
  expect(received().sort()).toEqual([...first].sort());
});

test("SIGTERM just after an outage: the batches waiting in backoff get one last attempt and arrive; none is dropped", async () => {
  await startAgent();
  const lines = await writeLines(25);
  await untilAllWaitInBackoff(25, 0, 3);
  await startReceiver();
  expect(await agent.stop()).toBe(0);
  expect(received().sort()).toEqual([...lines].sort());
  const last = agent.records.find((r) => typeof r.msg === "string" && r.msg.startsWith("export stopped"));
  expect(last).toMatchObject({ msg: "export stopped; queues drained", logs: { collected: 25, exported: 25, dropped_shutdown: 0, dropped: 0 } });
});
