/**
 * The log tail engine against the real export pipeline and an in-process OTLP receiver: a record the pipeline
 * refuses (mem_limit: the queue's bytes are full) is offered again later and counted once. Checks the
 * accounting identity exactly (collected = exported + dropped + queued + in flight, metrics included) and that
 * the receiver gets every line written, once.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LogsConfig } from "../../../src/collectors/logs/config";
import { testLogsConfig } from "../../helpers/logs-config";
import { TailEngine } from "../../../src/collectors/logs";
import { decodeRequest } from "../../../src/export/receiver";
import { Logger } from "../../../src/log/logger";
import { TestBackend, expectExactAccounting, harness, testConfig, waitUntil } from "../export/harness";

const open: Array<{ stop(deadlineMs?: number): Promise<void> }> = [];
const dirs: string[] = [];

afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.stop(2000);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const logsConfig = (dir: string): LogsConfig => testLogsConfig(dir);

/** Bodies of the log records in the receiver's requests, in arrival order. */
function receivedBodies(backend: TestBackend): string[] {
  const out: string[] = [];
  for (const r of backend.requests) {
    if (r.signal !== "logs") continue;
    const doc = decodeRequest("logs", r.body) as { resourceLogs?: Array<{ scopeLogs?: Array<{ logRecords?: Array<{ body?: { stringValue?: string } }> }> }> };
    for (const rl of doc.resourceLogs ?? []) for (const sl of rl.scopeLogs ?? []) for (const lr of sl.logRecords ?? []) out.push(lr.body?.stringValue ?? "");
  }
  return out;
}

async function setup(memLimit: string, text: string) {
  const dir = mkdtempSync(join(tmpdir(), "svc-logs-acc-"));
  dirs.push(dir);
  mkdirSync(join(dir, "logs"));
  writeFileSync(join(dir, "logs/app.log"), text);
  const backend = await new TestBackend().start();
  open.push(backend);
  const h = harness(testConfig({ otlp: { endpoint: backend.endpoint }, queues: { logs: { mem_limit: memLimit, batch_size: 8 } } }));
  open.push(h);
  await h.start();
  const engine = new TailEngine({ config: logsConfig(dir), pipeline: h.pipeline, workloads: undefined, logger: new Logger({ sink: () => {} }) });
  engine.start();
  open.push({ stop: (ms = 2000) => engine.stop(ms) });
  return { backend, h, engine };
}

describe("log tailing through the real pipeline: each line counted once", () => {
  test("records refused for mem_limit are offered again and counted collected once; the receiver gets every line once", async () => {
    const N = 2000;
    const written = Array.from({ length: N }, (_, i) => `line-${i} ${"x".repeat(100)}`);
    // 4 KiB of encoded records at most in the queue: almost every offer is partly refused.
    const { backend, h, engine } = await setup("4KiB", written.join("\n") + "\n");
    await waitUntil(() => h.pipeline.accounting().logs.exported >= N, { what: `${N} lines exported`, timeoutMs: 30_000 });
    const acc = h.pipeline.accounting().logs;
    expect(acc.collected).toBe(N);
    expect(acc.droppedTotal).toBe(0);
    expect(acc.exported).toBe(N);
    expect(engine.stats.recordsAccepted).toBe(N);
    await expectExactAccounting(h);
    // Batches are pipelined (several in flight), so arrival order may differ from file order: compare as multisets.
    expect(receivedBodies(backend).sort()).toEqual([...written].sort());
  });

  test("a record larger than mem_limit on its own is dropped once (mem_limit) and the lines after it still arrive", async () => {
    const before = Array.from({ length: 50 }, (_, i) => `before-${i}`);
    const after = Array.from({ length: 50 }, (_, i) => `after-${i}`);
    const huge = "h".repeat(6000);
    const { backend, h } = await setup("4KiB", [...before, huge, ...after].join("\n") + "\n");
    await waitUntil(() => h.pipeline.accounting().logs.exported >= 100, { what: "100 lines exported", timeoutMs: 30_000 });
    const acc = h.pipeline.accounting().logs;
    expect(acc.collected).toBe(101);
    expect(acc.dropped.mem_limit).toBe(1);
    expect(acc.droppedTotal).toBe(1);
    expect(acc.exported).toBe(100);
    await expectExactAccounting(h);
    expect(receivedBodies(backend).sort()).toEqual([...before, ...after].sort());
  });

  test("pipeline.offer takes a prefix and counts only it; after shutdown it takes and counts nothing", async () => {
    const backend = await new TestBackend().start();
    open.push(backend);
    const h = harness(testConfig({ otlp: { endpoint: backend.endpoint }, queues: { logs: { capacity: 3 } } }));
    open.push(h);
    const record = (body: string) => ({ body, observedTimeUnixNano: 1n });
    expect(h.pipeline.offer("logs", [record("a"), record("b"), record("c"), record("d"), record("e")])).toBe(3);
    expect(h.pipeline.accounting().logs).toMatchObject({ collected: 3, droppedTotal: 0, queued: 3 });
    expect(h.pipeline.offer("logs", [record("d")])).toBe(0);
    expect(h.pipeline.accounting().logs.collected).toBe(3);
    await expectExactAccounting(h);
    await h.stop(100);
    const after = h.pipeline.accounting().logs;
    expect(h.pipeline.offer("logs", [record("f")])).toBe(0);
    expect(h.pipeline.accounting().logs).toEqual(after);
    await expectExactAccounting(h);
  });
});
