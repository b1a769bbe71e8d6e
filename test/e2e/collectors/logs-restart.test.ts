/**
 * Log collection through the compiled agent to a real OTLP/gRPC receiver (in-process, port 0): lines are
 * appended while the agent runs, the agent is stopped mid-file (SIGTERM, then SIGKILL) and restarted on the
 * same checkpoint file, and what the receiver got is compared with what was written.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { OtlpReceiver, decodeRequest } from "../../../src/export/receiver";
import { QUIET_CONFIG, spawnAgent, type AgentProcess } from "../../helpers";

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

interface Body {
  stringValue?: string;
}

async function receiver(): Promise<{ port: number; lines: string[] }> {
  const lines: string[] = [];
  const r = new OtlpReceiver({
    listen: "127.0.0.1:0",
    onRequest: (req) => {
      const doc = decodeRequest("logs", req.body) as { resourceLogs?: Array<{ scopeLogs?: Array<{ logRecords?: Array<{ body?: Body }> }> }> };
      for (const rl of doc.resourceLogs ?? []) for (const sl of rl.scopeLogs ?? []) for (const lr of sl.logRecords ?? []) lines.push(lr.body?.stringValue ?? "");
    },
  });
  const port = await r.start();
  cleanup.push(() => r.stop());
  return { port, lines };
}

function setup(port: number) {
  const dir = mkdtempSync(join(tmpdir(), "svc-logs-e2e-"));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const config =
    QUIET_CONFIG.replace("${OTLP_ENDPOINT:-127.0.0.1:4317}", `127.0.0.1:${port}`) +
    `  logs:\n    enabled: true\n    include: ["${dir}/*.log"]\n    checkpoint_file: ${dir}/state/checkpoint.json\n    checkpoint_interval: 100ms\n    poll_interval: 20ms\n`;
  return { dir, config, file: join(dir, "app.log") };
}

async function start(config: string): Promise<AgentProcess> {
  const a = await spawnAgent({ config });
  cleanup.push(() => void a.stop());
  return a;
}

const cri = (i: number) => `2026-01-02T03:04:05.000000001Z stdout F line-${i}\n`;

/** Appends lines [from, to) in chunks, yielding between chunks so the agent reads while the file grows. */
async function write(file: string, from: number, to: number, chunk = 500): Promise<void> {
  for (let i = from; i < to; i += chunk) {
    let text = "";
    for (let j = i; j < Math.min(to, i + chunk); j++) text += cri(j);
    appendFileSync(file, text);
    await Bun.sleep(1);
  }
}

async function until(what: string, cond: () => boolean, timeoutMs = 20_000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (!cond()) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(10);
  }
}

function checkpointOffset(path: string): number {
  try {
    return (JSON.parse(readFileSync(path, "utf8")) as { files: Array<{ offset: number }> }).files[0]?.offset ?? 0;
  } catch {
    return 0;
  }
}

/** How many of the lines written (in order) end at or before `offset`. */
function linesWithin(offset: number): number {
  let end = 0;
  let n = 0;
  while ((end += Buffer.byteLength(cri(n))) <= offset) n++;
  return n;
}

function compare(received: string[], total: number): { missing: number; duplicates: number } {
  const counts = new Map<string, number>();
  for (const l of received) counts.set(l, (counts.get(l) ?? 0) + 1);
  let missing = 0;
  for (let i = 0; i < total; i++) if (!counts.has(`line-${i}`)) missing++;
  const duplicates = received.length - counts.size;
  return { missing, duplicates };
}

describe("log collection across agent restarts (compiled agent, real OTLP receiver)", () => {
  test("SIGTERM mid-file, restart: every line exactly once", async () => {
    const rx = await receiver();
    const { dir, config, file } = setup(rx.port);
    writeFileSync(file, "");
    const a1 = await start(config);
    await write(file, 0, 20_000);
    await until("some lines exported", () => rx.lines.length >= 5_000);
    expect(await a1.stop()).toBe(0);
    const atStop = rx.lines.length;
    await write(file, 20_000, 30_000);
    await start(config);
    await until("all lines", () => new Set(rx.lines).size >= 30_000);
    // Once the checkpoint covers the whole file, every line read again (a duplicate) was already exported.
    await until("the checkpoint at the end of the file", () => checkpointOffset(join(dir, "state/checkpoint.json")) === Bun.file(file).size);
    expect(atStop).toBeLessThan(30_000);
    expect(compare(rx.lines, 30_000)).toEqual({ missing: 0, duplicates: 0 });
  }, 60_000);

  test("SIGKILL mid-file, restart: no line lost; only lines exported after the last checkpoint are sent again", async () => {
    const rx = await receiver();
    const { dir, config, file } = setup(rx.port);
    writeFileSync(file, "");
    const a1 = await start(config);
    const writing = write(file, 0, 40_000, 200);
    const checkpointed = () => checkpointOffset(join(dir, "state/checkpoint.json"));
    await until("a checkpoint and lines flowing", () => checkpointed() > 0 && rx.lines.length >= 8_000);
    a1.proc.kill("SIGKILL");
    await a1.proc.exited;
    const beforeKill = rx.lines.length;
    const covered = linesWithin(checkpointed());
    await writing;
    await start(config);
    await until("all lines", () => new Set(rx.lines).size >= 40_000);
    await until("the checkpoint at the end of the file", () => checkpointOffset(join(dir, "state/checkpoint.json")) === Bun.file(file).size);
    const { missing, duplicates } = compare(rx.lines, 40_000);
    expect(missing).toBe(0);
    // At-least-once: only what was exported after the last checkpoint comes again.
    expect(covered).toBeGreaterThan(0);
    expect(duplicates).toBeLessThanOrEqual(beforeKill - covered);
    console.log(`SIGKILL restart: ${beforeKill} lines exported before the kill, ${covered} covered by the checkpoint, ${duplicates} sent again, 0 lost`);
  }, 60_000);
});
