/**
 * Reload and signals.
 * - 1,000 invalid reloads in a row (POST /admin/reload with an invalid file) against the compiled agent: each
 *   is a 400 naming the key, the configuration in force is unchanged, and RSS stays flat (see RSS_GROWTH_KIB).
 * - 1,000 invalid reloads of a file with many problems, in-process: the JavaScript heap (size and object count
 *   after Bun.gc(true)) stays flat; the refusals' log records are held by the ring of recent records, at most
 *   RECENT_MAX_BYTES (see HEAP_FLAT_BYTES).
 * - Reloads under load lose nothing (in-process agent, real OTLP receiver, spans submitted steadily while the
 *   batch size, compression (a new transport) and backoff change every 100 ms).
 * - SIGHUP storms (valid and invalid file): the agent stays up, answers, keeps a valid configuration.
 * - SIGTERM during an outage: the compiled agent drains what it can within shutdown_timeout, exits 0, and
 *   reports the rest as dropped with reason shutdown (its last log record; exported + dropped = collected).
 */
import { afterAll, describe, expect, test } from "bun:test";
import { appendFileSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { heapStats } from "bun:jsc";
import { OtlpReceiver, decodeRequest } from "../../src/export/receiver";
import { Logger, RECENT_MAX_BYTES } from "../../src/log/logger";
import { spawnAgent } from "../helpers/agent-process";
import { inProcessAgent, stopAllAgents } from "../helpers/in-process";
import { json, waitUntil } from "../helpers/wait";
import { spans } from "../integration/export/harness";
import { rssKiB } from "./lib/agent-config";
import { quietConfig } from "../helpers/quiet-config";

const INVALID_RELOADS = 1000;
/**
 * Reloads before the measured ones: each refused reload logs a warning into the ring of recent log records
 * (svc.recent_records, 1,000 by default, at most RECENT_MAX_BYTES), which grows until full; the warm-up fills it,
 * and takes JIT and allocator growth out of the figure too.
 */
const WARMUP_RELOADS = 1000;
/**
 * Allowed growth over 1,000 invalid reloads after the warm-up, both measured after full collections
 * (/debug/pprof/heap?gc=1). A leaked reload keeps at least its parsed document, problem list and error answer
 * (several KiB): 1,000 of them would add several MiB of live JavaScript heap, hence the heap bound of 2 MiB.
 * RSS moves with the allocator regardless of what is live: measured here over 6,000 invalid reloads, the heap
 * stayed within 0.7 MiB while RSS went up and down by as much as 16 MiB (106 -> 125 -> 109 MiB), so RSS is
 * bounded at 16 MiB (about 15% of the ~110 MiB the agent holds) to catch a gross leak, the heap for a fine one.
 */
const HEAP_GROWTH_KIB = 2 * 1024;
const RSS_GROWTH_KIB = 16 * 1024;
/** RSS readings per measurement (the lowest counts) and the time between them. */
const RSS_SAMPLES = 5;
const RSS_SAMPLE_GAP_MS = 400;

afterAll(stopAllAgents);

describe("invalid reloads", () => {
  test(`${INVALID_RELOADS} invalid reloads in a row: 400 each, configuration unchanged, memory flat`, async () => {
    // Debug on for /debug/pprof/heap?gc=1: a full collection before each sample, so RSS is not garbage-timing.
    const a = await spawnAgent({ config: quietConfig({ selfTelemetry: "  debug:\n    enabled: true" }) });
    // RSS is the lowest of RSS_SAMPLES readings after collections, RSS_SAMPLE_GAP_MS apart: the allocator gives freed
    // pages back to the system on its own schedule, so one reading may hold pages it is about to return; a leak
    // keeps them in every reading.
    const settled = async () => {
      let rss = Infinity;
      for (let s = 0; s < RSS_SAMPLES; s++) {
        if (s > 0) await Bun.sleep(RSS_SAMPLE_GAP_MS);
        for (let i = 0; i < 3; i++) await (await fetch(`${a.url}/debug/pprof/heap?gc=1`)).arrayBuffer();
        rss = Math.min(rss, rssKiB(a.proc.pid));
      }
      const vars = await json(fetch(`${a.url}/debug/vars`));
      return { rss, heap: Math.round(Number(vars.memstats.HeapAlloc) / 1024) };
    };
    try {
      const before = await (await fetch(`${a.url}/config`)).text();
      const invalid = quietConfig() + "\nqueues:\n  traces:\n    capacity: -5\n    batch_size: lots\n";
      writeFileSync(a.configPath, invalid);
      const reload = async () => {
        const r = await fetch(`${a.url}/admin/reload`, { method: "POST" });
        const body = await json(r);
        expect(r.status).toBe(400);
        expect(JSON.stringify(body)).toContain("queues.traces.capacity");
      };
      for (let i = 0; i < WARMUP_RELOADS; i++) await reload();
      const start = await settled();
      for (let i = 0; i < INVALID_RELOADS; i++) await reload();
      const end = await settled();
      console.log(
        `after ${WARMUP_RELOADS} invalid reloads: RSS ${start.rss} KiB, heap ${start.heap} KiB; after ${INVALID_RELOADS} more: RSS ${end.rss} KiB, heap ${end.heap} KiB`,
      );
      expect(end.heap - start.heap).toBeLessThan(HEAP_GROWTH_KIB);
      expect(end.rss - start.rss).toBeLessThan(RSS_GROWTH_KIB);
      expect(await (await fetch(`${a.url}/config`)).text()).toBe(before);
      expect((await fetch(`${a.url}/healthz`)).status).toBe(200);
      expect(a.records.filter((r) => r.msg === "configuration reloaded").length).toBe(0);
    } finally {
      expect(await a.stop()).toBe(0);
    }
  }, 120_000);
});

/** Problems in the file of the heap test: a refusal's log record is then ~3.5 KiB (an operator's badly broken file). */
const MANY_PROBLEMS = 40;
/**
 * Reloads before the heap is first measured (JIT, structure caches): enough refusals to fill the ring of recent
 * records up to RECENT_MAX_BYTES (~400 of these records).
 */
const HEAP_WARMUP_RELOADS = 500;
/** svc.recent_records in the heap test: more records than the test makes, so only RECENT_MAX_BYTES bounds the ring. */
const HEAP_TEST_RECENT_RECORDS = 100_000;
/**
 * Allowed heap growth over 1,000 invalid reloads once the ring is full. The refusals' records used to be kept whole
 * as objects (~40 strings and an array each: ~4 KiB of heap per reload for this file, ~9 KiB for bigger ones),
 * bounded by svc.recent_records alone: 1,000 reloads added ~4 MiB and ~40,000 objects here.
 */
const HEAP_FLAT_BYTES = 512 * 1024;
/** Allowed growth in live objects over 1,000 invalid reloads: one ring line each, with room for noise. */
const HEAP_FLAT_OBJECTS = 3 * INVALID_RELOADS;

test(`${INVALID_RELOADS} invalid reloads of a file with ${MANY_PROBLEMS} problems leave the heap flat after a full collection`, async () => {
  const valid = quietConfig({ extra: `svc:\n  recent_records: ${HEAP_TEST_RECENT_RECORDS}` });
  const a = await inProcessAgent(valid, { backend: false, logger: new Logger({ sink: () => {} }) });
  try {
    let invalid = valid + "\nqueues:\n  traces:\n    capacity: -5\n";
    for (let i = 0; i < MANY_PROBLEMS; i++) invalid += `an_unknown_key_of_a_broken_file_number_${i}: ${i}\n`;
    a.writeConfig(invalid);
    const reload = async () => {
      const r = await a.request("/admin/reload", { method: "POST" });
      expect(r.status).toBe(400);
      await r.arrayBuffer();
    };
    const measure = () => {
      Bun.gc(true);
      Bun.gc(true);
      const s = heapStats();
      return { bytes: s.heapSize, objects: s.objectCount };
    };
    for (let i = 0; i < HEAP_WARMUP_RELOADS; i++) await reload();
    const start = measure();
    for (let i = 0; i < INVALID_RELOADS; i++) await reload();
    const end = measure();
    console.log(
      `${INVALID_RELOADS} invalid reloads (${MANY_PROBLEMS} problems each): heap ${start.bytes} -> ${end.bytes} bytes (${((end.bytes - start.bytes) / INVALID_RELOADS).toFixed(0)} per reload), objects ${start.objects} -> ${end.objects}; ring ${a.agent.logger.recentBytes} bytes`,
    );
    expect(a.agent.logger.recentBytes).toBeLessThanOrEqual(RECENT_MAX_BYTES);
    expect(end.bytes - start.bytes).toBeLessThan(HEAP_FLAT_BYTES);
    expect(end.objects - start.objects).toBeLessThan(HEAP_FLAT_OBJECTS);
  } finally {
    await a.stop();
  }
}, 120_000);

test("reloads under load lose nothing: batch size, compression (new transport) and backoff change every 100 ms", async () => {
  const ids = new Set<string>();
  let received = 0;
  const rx = new OtlpReceiver({
    listen: "127.0.0.1:0",
    onRequest: (r) => {
      if (r.signal !== "traces" || r.items === 0) return;
      const d = decodeRequest("traces", r.body) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<{ spanId: string }> }> }> };
      for (const rs of d.resourceSpans) for (const ss of rs.scopeSpans) for (const s of ss.spans) (ids.add(s.spanId), received++);
    },
  });
  const port = await rx.start();
  const variant = (i: number) =>
    quietConfig({
      endpoint: `127.0.0.1:${port}`,
      extra: `backoff:\n  initial: ${i % 2 ? "20ms" : "50ms"}\n  max: 200ms\nqueues:\n  traces:\n    batch_size: ${[50, 100, 200][i % 3]}\n    batch_timeout: 10ms`,
    }).replace("  endpoint:", `  compression: ${i % 2 ? "gzip" : "none"}\n  endpoint:`);
  const a = await inProcessAgent(variant(0), { backend: false, waitReady: true });
  try {
    let submitted = 0;
    let stop = false;
    const load = (async () => {
      while (!stop) {
        submitted += a.agent.ctx.pipeline.submit("traces", spans(50));
        await Bun.sleep(5);
      }
    })();
    for (let i = 1; i <= 30; i++) {
      a.writeConfig(variant(i));
      const r = await a.request("/admin/reload", { method: "POST" });
      expect(r.status).toBe(200);
      await Bun.sleep(100);
    }
    stop = true;
    await load;
    await waitUntil(
      () => {
        const t = a.agent.ctx.pipeline.accounting!().traces;
        return ids.size >= submitted && t.queued === 0 && t.inFlight === 0;
      },
      { what: `${submitted} spans at the backend and acknowledged`, timeoutMs: 20_000 },
    );
    const acc = a.agent.ctx.pipeline.accounting!().traces;
    expect(acc.collected).toBe(submitted);
    expect(acc.droppedTotal).toBe(0);
    expect(acc.exported).toBe(submitted);
    expect(ids.size).toBe(submitted);
    console.log(`reloads under load: 30 reloads, ${submitted} spans submitted, ${ids.size} distinct at the backend, ${received - ids.size} sent twice, 0 dropped`);
  } finally {
    await a.stop();
    await rx.stop();
  }
}, 60_000);

describe("signals", () => {
  test("SIGHUP storms (valid file, then invalid file): the agent stays up and keeps a valid configuration", async () => {
    const a = await spawnAgent({ config: quietConfig() });
    try {
      for (let i = 0; i < 300; i++) a.proc.kill("SIGHUP");
      await waitUntil(() => a.records.some((r) => r.msg === "configuration reloaded"), { what: "a reload from SIGHUP" });
      expect((await fetch(`${a.url}/healthz`)).status).toBe(200);
      const good = await (await fetch(`${a.url}/config`)).text();
      writeFileSync(a.configPath, "queues: [not, a, mapping\n");
      for (let i = 0; i < 300; i++) a.proc.kill("SIGHUP");
      await waitUntil(() => a.records.some((r) => r.msg === "reload rejected: invalid configuration" && r.trigger === "SIGHUP"), { what: "a refused reload logged" });
      for (let i = 0; i < 20; i++) expect((await fetch(`${a.url}/healthz`)).status).toBe(200);
      expect(await (await fetch(`${a.url}/config`)).text()).toBe(good);
      expect(a.proc.exitCode).toBeNull();
    } finally {
      expect(await a.stop()).toBe(0);
    }
  }, 60_000);

  async function outage(shutdownTimeout: string, delayMs: number | undefined, lines: number) {
    const rxLines: string[] = [];
    let rx: OtlpReceiver | undefined = new OtlpReceiver({
      listen: "127.0.0.1:0",
      respond: async (req) => {
        if (delayMs) await Bun.sleep(delayMs);
        const doc = decodeRequest("logs", req.body) as { resourceLogs?: Array<{ scopeLogs?: Array<{ logRecords?: unknown[] }> }> };
        for (const rl of doc.resourceLogs ?? []) for (const sl of rl.scopeLogs ?? []) for (const _ of sl.logRecords ?? []) rxLines.push("x");
        return { ok: true };
      },
    });
    const port = await rx.start();
    if (delayMs === undefined) {
      rx.kill();
      rx = undefined;
    }
    const dir = mkdtempSync(join(tmpdir(), "svc-rel-term-"));
    const file = join(dir, "app.log");
    writeFileSync(file, "");
    const config = quietConfig({
      endpoint: `127.0.0.1:${port}`,
      extra: `shutdown_timeout: ${shutdownTimeout}\nbackoff:\n  initial: 50ms\n  max: 200ms\nqueues:\n  logs:\n    batch_size: 100\n    batch_timeout: 20ms`,
    }).replace("agent:\n", `agent:\n  logs:\n    enabled: true\n    include: ["${dir}/*.log"]\n    checkpoint_file: ${dir}/checkpoint.json\n    poll_interval: 20ms\n`);
    const a = await spawnAgent({ config });
    let t = "";
    for (let i = 0; i < lines; i++) t += `2026-01-02T03:04:05.000000001Z stdout F line-${i}\n`;
    appendFileSync(file, t);
    await waitUntil(async () => /^svc_logs_collected_total (\d+)$/m.exec(await (await fetch(`${a.url}/metrics`)).text())?.[1] === String(lines), {
      what: `${lines} lines collected`,
      timeoutMs: 20_000,
    });
    const started = performance.now();
    a.proc.kill("SIGTERM");
    const code = await a.proc.exited;
    const seconds = (performance.now() - started) / 1000;
    await rx?.stop();
    const last = a.records.find((r) => String(r.msg).startsWith("export stopped"));
    return { code, seconds, last, received: rxLines.length, records: a.records };
  }

  test("SIGTERM with the backend down: exit 0 within shutdown_timeout, everything reported dropped (shutdown)", async () => {
    const r = await outage("1s", undefined, 2000);
    expect(r.code).toBe(0);
    // The deadline (1 s) plus the rest of the shutdown; a hang would be the full test timeout.
    expect(r.seconds).toBeLessThan(5);
    expect(r.last).toBeDefined();
    const logs = r.last!.logs as { collected: number; exported: number; dropped_shutdown: number; dropped: number };
    expect(logs).toEqual({ collected: 2000, exported: 0, dropped_shutdown: 2000, dropped: 2000 });
    expect(r.last!.level).toBe("warn");
    expect(r.received).toBe(0);
    expect(r.records.findIndex((x) => x.msg === "shutting down")).toBeLessThan(r.records.findIndex((x) => x === r.last));
  }, 60_000);

  test("SIGTERM with a slow backend: drains what it can within shutdown_timeout, the rest reported dropped", async () => {
    const r = await outage("1500ms", 300, 20_000);
    expect(r.code).toBe(0);
    expect(r.seconds).toBeLessThan(6);
    const logs = r.last!.logs as { collected: number; exported: number; dropped_shutdown: number; dropped: number };
    expect(logs.collected).toBe(20_000);
    expect(logs.exported + logs.dropped).toBe(20_000);
    expect(logs.dropped_shutdown).toBe(logs.dropped);
    expect(logs.exported).toBeGreaterThan(0);
    expect(logs.dropped_shutdown).toBeGreaterThan(0);
    // What the agent says it exported is what the backend took (a batch cancelled at the deadline may have
    // reached the backend after the client gave up: at most the batches in flight).
    expect(r.received).toBeGreaterThanOrEqual(logs.exported);
    expect(r.received - logs.exported).toBeLessThanOrEqual(4 * 100);
    console.log(`SIGTERM with a slow backend: ${logs.exported} exported during the drain, ${logs.dropped_shutdown} dropped (shutdown), exit after ${r.seconds.toFixed(2)} s`);
  }, 60_000);
});
