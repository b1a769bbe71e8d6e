/** Each link of the export chain alone, behind the one Sender interface, with fakes for its neighbours. */
import { describe, expect, test } from "bun:test";
import { loadConfig } from "../../../src/config/load";
import { ExportChain } from "../../../src/export/chain";
import type { EncodedItem } from "../../../src/export/encode";
import type { ExportOutcome } from "../../../src/export/outcome";
import { QueueSender, SignalQueue } from "../../../src/export/queue";
import { RetrySender } from "../../../src/export/retry";
import { MeasureSender, Slot, TimeoutSender, TransportSender, type ExportRequest, type PushSender, type Sender, type TimedRequest } from "../../../src/export/sender";
import type { Transport } from "../../../src/export/transport";
import { AgentMetrics } from "../../../src/telemetry/metrics";
import { TaskRegistry } from "../../../src/telemetry/tasks";
import { flushPromises } from "../../helpers/fake-timers";

const item = (bytes: number): EncodedItem => ({ bytes: new Uint8Array(bytes), scope: undefined, resource: undefined });
const ok: ExportOutcome = { kind: "success", rejected: 0, message: "" };
const request: ExportRequest = { signal: "traces", body: new Uint8Array([1, 2, 3]), items: 3 };

/** A next link that records what it got and answers from `answers` (then success). */
function recorder<Req>(answers: ExportOutcome[] = []): Sender<Req> & { got: Req[] } {
  const got: Req[] = [];
  return { got, send: async (r: Req) => (got.push(r), answers.shift() ?? ok) };
}

describe("QueueSender", () => {
  const wakes = () => {
    let n = 0;
    return { next: { send: () => void n++ }, count: () => n };
  };

  test("submit form: offers every item, counts refusals by reason and undecodable items, wakes the batch link", () => {
    const w = wakes();
    const q = new QueueSender(new SignalQueue(2, 100), w.next);
    const r = q.send({ items: [item(10), undefined, item(200), item(10), item(10)], prefix: false });
    expect(r).toEqual({ accepted: 2, taken: 5, invalid: 1, queue_full: 1, mem_limit: 1, disk_full: 0 });
    expect(q.queue.size).toBe(2);
    expect(w.count()).toBe(1);
  });

  test("offer form: takes the longest prefix that fits; an item too large for mem_limit alone is taken and refused", () => {
    const w = wakes();
    const q = new QueueSender(new SignalQueue(10, 100), w.next);
    const r = q.send({ items: [item(60), undefined, item(101), item(50), item(1)], prefix: true });
    expect(r).toEqual({ accepted: 1, taken: 3, invalid: 1, queue_full: 0, mem_limit: 1, disk_full: 0 });
    expect(q.queue.size).toBe(1);
    expect(q.queue.bytes).toBe(60);
  });

  test("offer form does not pull items past the first refusal (they are encoded only when taken)", () => {
    const q = new QueueSender(new SignalQueue(1, 100), { send: () => {} });
    let pulled = 0;
    function* items() {
      for (let i = 0; i < 5; i++) {
        pulled++;
        yield item(1);
      }
    }
    expect(q.send({ items: items(), prefix: true }).taken).toBe(1);
    expect(pulled).toBe(2);
  });

  test("submit form: after disk_full the rest of the call is refused as disk_full too", () => {
    const queue = new SignalQueue(10, 100);
    let offers = 0;
    queue.offer = () => (++offers === 2 ? "disk_full" : "ok");
    const r = new QueueSender(queue, { send: () => {} }).send({ items: [item(1), item(1), item(1), item(1)], prefix: false });
    expect(r).toEqual({ accepted: 1, taken: 4, invalid: 0, queue_full: 0, mem_limit: 0, disk_full: 3 });
    expect(offers).toBe(2);
  });
});

describe("MeasureSender", () => {
  test("counts every attempt, its latency, and errors by code name", async () => {
    const metrics = new AgentMetrics("svc", new TaskRegistry());
    const next = recorder<ExportRequest>([{ kind: "retryable", code: 14, message: "down", delayMs: undefined }]);
    const m = new MeasureSender(next, metrics);
    expect((await m.send(request)).kind).toBe("retryable");
    expect((await m.send(request)).kind).toBe("success");
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/^svc_export_requests_total\{signal="traces"\} 2$/m);
    expect(text).toMatch(/^svc_export_errors_total\{signal="traces",code="UNAVAILABLE"\} 1$/m);
    expect(text).toMatch(/^svc_export_latency_seconds_count\{signal="traces"\} 2$/m);
    expect(next.got).toEqual([request, request]);
  });
});

describe("TimeoutSender", () => {
  test("gives each attempt its signal's deadline and the shutdown cancel signal; cancelAll aborts it", async () => {
    const next = recorder<TimedRequest>();
    const push: PushSender = { send: (r) => next.send(r), beforeRetryAll() {}, close() {} };
    const t = new TimeoutSender(() => push, (s) => (s === "traces" ? 1000 : 5000));
    const before = Date.now();
    await t.send(request);
    const sent = next.got[0]!;
    expect(sent.items).toBe(3);
    expect(sent.body).toBe(request.body);
    expect(sent.deadline).toBeGreaterThanOrEqual(before + 1000);
    expect(sent.deadline).toBeLessThan(before + 5000);
    expect(sent.cancel?.aborted).toBe(false);
    t.cancelAll();
    expect(sent.cancel?.aborted).toBe(true);
  });
});

describe("TransportSender", () => {
  const fakeTransport = (name: string, log: string[]): Transport => ({
    send: async (signal, body, deadline) => (log.push(`${name} ${signal} ${body.length} ${deadline}`), ok),
    ready: () => true,
    close: () => void log.push(`${name} closed`),
  });

  test("sends each attempt over the transport in use; use() swaps it and closes the previous one", async () => {
    const log: string[] = [];
    const t = new TransportSender(fakeTransport("a", log));
    await t.send({ ...request, deadline: 7 });
    const b = fakeTransport("b", log);
    t.use(b);
    expect(t.transport).toBe(b);
    await t.send({ ...request, deadline: 8 });
    t.close();
    expect(log).toEqual(["a traces 3 7", "a closed", "b traces 3 8", "b closed"]);
  });
});

describe("Slot", () => {
  test("put replaces what is in use and closes the one replaced, not the same one put again", () => {
    const closed: string[] = [];
    const thing = (name: string) => ({ name, close: () => void closed.push(name) });
    const a = thing("a");
    const slot = new Slot(a);
    slot.put(a);
    expect(closed).toEqual([]);
    const b = thing("b");
    slot.put(b);
    expect(slot.current).toBe(b);
    expect(closed).toEqual(["a"]);
  });
});

describe("RetrySender", () => {
  test("resends retryable outcomes to the next link, counting retries; a flush's wakeAll cuts the wait short", async () => {
    const next = recorder<ExportRequest>([{ kind: "retryable", code: 14, message: "down", delayMs: 60_000 }]);
    const retried: string[] = [];
    let waits = 0;
    const r = new RetrySender(next, { backoff: () => ({ initialMs: 60_000, maxMs: 60_000 }), onRetry: (q) => retried.push(q.signal), onWait: () => waits++ });
    const p = r.send(request);
    await flushPromises();
    expect(waits).toBe(1);
    expect(r.allFailedSince(0)).toBe(true);
    expect(r.lastError()).toBe("UNAVAILABLE: down");
    r.wakeAll();
    expect((await p).kind).toBe("success");
    expect(retried).toEqual(["traces"]);
    expect(next.got).toHaveLength(2);
    expect(r.allFailedSince(0)).toBe(false);
  });
});

describe("ExportChain", () => {
  test("holds batches until a push is connected, then sends them down retry -> measure -> timeout -> push", async () => {
    const config = loadConfig(undefined, {}).config;
    const metrics = new AgentMetrics("svc", new TaskRegistry());
    const chain = new ExportChain({ config, metrics });
    const batches: number[] = [];
    const lane = chain.lane("traces", new SignalQueue(100, 1 << 20), { send: async (items) => void batches.push(items.length) });
    lane.queue.send({ items: [item(1), item(1)], prefix: false });
    lane.batch.urgent(true);
    expect(batches).toEqual([]);
    const sent: TimedRequest[] = [];
    chain.connect({ send: async (r) => (sent.push(r), ok), beforeRetryAll() {}, close() {} });
    expect(batches).toEqual([2]);
    expect((await chain.retry.send(request)).kind).toBe("success");
    expect(sent).toHaveLength(1);
    expect(sent[0]!.deadline).toBeGreaterThan(Date.now());
    lane.batch.stop();
  });
});
