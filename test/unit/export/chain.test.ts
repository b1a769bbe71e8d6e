/** The small links of the chain with fakes: queue limits, batcher triggers, backoff and retry decisions. */
import { describe, expect, jest, test } from "bun:test";
import { BatchSender } from "../../../src/export/batcher";
import type { EncodedItem } from "../../../src/export/encode";
import type { ExportOutcome } from "../../../src/export/outcome";
import { SignalQueue } from "../../../src/export/queue";
import { BACKOFF_JITTER, backoffDelayMs, sendWithRetry } from "../../../src/export/retry";
import { readinessReason } from "../../../src/export/outcome";
import { advanceTimersByTime, flushPromises } from "../../helpers/fake-timers";

const item = (bytes: number): EncodedItem => ({ bytes: new Uint8Array(bytes), scope: undefined, resource: undefined });

describe("SignalQueue", () => {
  test("refuses by capacity first, then by bytes, and frees bytes on take", () => {
    const q = new SignalQueue(3, 100);
    expect(q.offer(item(40))).toBe("ok");
    expect(q.offer(item(40))).toBe("ok");
    expect(q.offer(item(40))).toBe("mem_limit");
    expect(q.offer(item(20))).toBe("ok");
    expect(q.offer(item(1))).toBe("queue_full");
    expect(q.take(2).map((e) => e.bytes.length)).toEqual([40, 40]);
    expect(q.bytes).toBe(20);
    expect(q.size).toBe(1);
    q.capacity = 10;
    expect(q.offer(item(80))).toBe("ok");
    expect(q.take(10)).toHaveLength(2);
    expect(q.size).toBe(0);
  });
});

describe("BatchSender", () => {
  test("cuts full batches at once, partial ones after the timeout, and respects maxInFlight", async () => {
    const q = new SignalQueue(100, 1 << 20);
    const batches: number[] = [];
    const pending: Array<() => void> = [];
    jest.useFakeTimers();
    try {
      const b = new BatchSender(q, () => ({ batchSize: 4, batchTimeoutMs: 30, maxInFlight: 1 }), {
        send: (items) => {
          batches.push(items.length);
          return new Promise<void>((r) => pending.push(r));
        },
      });
      for (let i = 0; i < 9; i++) q.offer(item(1));
      b.send();
      expect(batches).toEqual([4]);
      pending.shift()!();
      await flushPromises();
      expect(batches).toEqual([4, 4]);
      pending.shift()!();
      await flushPromises();
      expect(batches).toEqual([4, 4]);
      advanceTimersByTime(29);
      expect(batches).toEqual([4, 4]);
      advanceTimersByTime(1);
      expect(batches).toEqual([4, 4, 1]);
      b.stop();
    } finally {
      jest.useRealTimers();
    }
  });

  test("urgent sends partial batches without waiting", () => {
    const q = new SignalQueue(100, 1 << 20);
    const batches: number[] = [];
    const b = new BatchSender(q, () => ({ batchSize: 10, batchTimeoutMs: 60_000, maxInFlight: 4 }), { send: async (items) => void batches.push(items.length) });
    q.offer(item(1));
    q.offer(item(1));
    b.send();
    expect(batches).toEqual([]);
    b.urgent(true);
    expect(batches).toEqual([2]);
    b.stop();
  });

  test("maxInFlight 0 (no transport yet) holds everything", () => {
    const q = new SignalQueue(100, 1 << 20);
    let called = false;
    const b = new BatchSender(q, () => ({ batchSize: 1, batchTimeoutMs: 1, maxInFlight: 0 }), { send: async () => void (called = true) });
    q.offer(item(1));
    b.urgent(true);
    expect(called).toBe(false);
    b.stop();
  });
});

describe("retry", () => {
  test("backoff doubles from initial, is capped at max, and jitters by ±50%", () => {
    expect(BACKOFF_JITTER).toBe(0.5);
    expect(backoffDelayMs(0, 100, 1000, () => 0.5)).toBe(100);
    expect(backoffDelayMs(1, 100, 1000, () => 0.5)).toBe(200);
    expect(backoffDelayMs(3, 100, 1000, () => 0.5)).toBe(800);
    expect(backoffDelayMs(10, 100, 1000, () => 0.5)).toBe(1000);
    expect(backoffDelayMs(0, 100, 1000, () => 0)).toBe(50);
    expect(backoffDelayMs(0, 100, 1000, () => 1)).toBe(150);
    expect(backoffDelayMs(10, 100, 1000, () => 1)).toBe(1000);
  });

  const retryable = (delayMs?: number): ExportOutcome => ({ kind: "retryable", code: 14, message: "down", delayMs });

  test("retries retryable outcomes until success; stops at once on failure", async () => {
    const outcomes: ExportOutcome[] = [retryable(), retryable(1), { kind: "success", rejected: 0, message: "" }];
    let calls = 0;
    const r = await sendWithRetry(async () => (calls++, outcomes.shift()!), { backoff: () => ({ initialMs: 1, maxMs: 2 }), stop: new AbortController().signal });
    expect(r.kind).toBe("success");
    expect(calls).toBe(3);
    calls = 0;
    const f = await sendWithRetry(async () => (calls++, { kind: "failure", code: 3, message: "bad" }), { backoff: () => ({ initialMs: 1, maxMs: 2 }), stop: new AbortController().signal });
    expect(f.kind).toBe("failure");
    expect(calls).toBe(1);
  });

  test("stopped during the wait: one last attempt at once, then abandoned if it is retryable too", async () => {
    const stop = new AbortController();
    let calls = 0;
    const p = sendWithRetry(async () => (calls++, retryable()), { backoff: () => ({ initialMs: 60_000, maxMs: 60_000 }), stop: stop.signal });
    await flushPromises();
    expect(calls).toBe(1);
    stop.abort();
    const r = await p;
    expect(r.kind).toBe("abandoned");
    expect(calls).toBe(2);
  });

  test("stopped during the wait: the last attempt's success counts (the backend came back)", async () => {
    const stop = new AbortController();
    const outcomes: ExportOutcome[] = [retryable(), { kind: "success", rejected: 0, message: "" }];
    const p = sendWithRetry(async () => outcomes.shift()!, { backoff: () => ({ initialMs: 60_000, maxMs: 60_000 }), stop: stop.signal });
    await flushPromises();
    stop.abort();
    expect((await p).kind).toBe("success");
  });

  test("a server delay beyond the timer's range waits (no retry storm); a negative or NaN one falls back to the backoff", async () => {
    for (const [delay, expected] of [[999_999_999_000, 2 ** 31 - 1], [-5000, 60_000], [Number.NaN, 60_000]] as const) {
      const stop = new AbortController();
      const waits: number[] = [];
      let calls = 0;
      jest.useFakeTimers();
      try {
        const p = sendWithRetry(async () => (calls++, retryable(delay)), {
          backoff: () => ({ initialMs: 60_000, maxMs: 60_000 }),
          stop: stop.signal,
          onWait: (_o, ms) => waits.push(ms),
          random: () => 0.5,
        });
        await flushPromises();
        expect(waits).toEqual([expected]);
        // No second attempt until the whole wait has passed.
        advanceTimersByTime(expected - 1);
        await flushPromises();
        expect(calls).toBe(1);
        stop.abort();
        expect((await p).kind).toBe("abandoned");
        expect(calls).toBe(2);
      } finally {
        jest.useRealTimers();
      }
    }
  });

  test("stopped during an attempt: no further attempt", async () => {
    const stop = new AbortController();
    let calls = 0;
    const r = await sendWithRetry(async () => (calls++, stop.abort(), retryable()), { backoff: () => ({ initialMs: 1, maxMs: 1 }), stop: stop.signal });
    expect(r.kind).toBe("abandoned");
    expect(calls).toBe(1);
  });

  test("wake ends the wait early and the batch is tried again; onWait sees every wait", async () => {
    let wake = new AbortController();
    const waits: number[] = [];
    const outcomes: ExportOutcome[] = [retryable(), retryable(), { kind: "success", rejected: 0, message: "" }];
    let calls = 0;
    const p = sendWithRetry(async () => (calls++, outcomes.shift()!), {
      backoff: () => ({ initialMs: 60_000, maxMs: 60_000 }),
      stop: new AbortController().signal,
      wake: () => wake.signal,
      onWait: (_o, ms) => waits.push(ms),
      random: () => 0.5,
    });
    await flushPromises();
    expect(calls).toBe(1);
    const w = wake;
    wake = new AbortController();
    w.abort();
    await flushPromises();
    expect(calls).toBe(2);
    wake.abort();
    expect((await p).kind).toBe("success");
    expect(calls).toBe(3);
    expect(waits).toEqual([60_000, 60_000]);
  });
});

test("readiness reasons", () => {
  expect(readinessReason({ kind: "retryable", code: 14, message: "No connection established. Last error: connect ECONNREFUSED 127.0.0.1:1", delayMs: undefined })).toBe("connection refused");
  expect(readinessReason({ kind: "retryable", code: 4, message: "Deadline exceeded after 1.0s", delayMs: undefined })).toBe("deadline exceeded");
  expect(readinessReason({ kind: "failure", code: 16, message: "bad key" })).toBe("unauthenticated");
});
