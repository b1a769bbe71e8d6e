/**
 * RecordPump over the real ring walk (RingConsumer on a synthetic ring): records reach the handler once each,
 * counters move per batch, decode and handler errors are told apart, batches are sized by time and the poll
 * interval by the ring's size and fill.
 */
import { describe, expect, jest, test } from "bun:test";
import type { ReaderBinding } from "../../../src/ebpf/loader";
import {
  batchRecords,
  IDLE_POLLS_BEFORE_STRETCH,
  idlePollIntervalMs,
  MAX_RECORDS_PER_BATCH,
  MIN_RECORDS_PER_BATCH,
  nextPollIntervalMs,
  PollTicker,
  pollIntervalMs,
  QUIET_TICKS_BEFORE_WAIT,
  RecordPump,
  TURN_BUDGET_MS,
  WAITING_POLL_INTERVAL_MS,
} from "../../../src/ebpf/pump";
import type { ReadinessWait } from "../../../ffi/ring-wait";
import { FakeRing, record } from "../../helpers/fakes/ring";
import { advanceTimersByTime, advanceUntil, nextTurn, timersOf } from "../../helpers/fake-timers";

const decode = (v: DataView, o: number, len: number): number => {
  if (len < 4) throw new RangeError(`short: ${len}`);
  return v.getUint32(o, true);
};

function binding(ring: FakeRing, dec = decode): ReaderBinding<number> {
  return { map: "events", kind: "ringbuf", reader: ring.consumer, lostMap: undefined, decode: dec, sizeBytes: ring.size };
}

describe("RecordPump", () => {
  test("drain hands each record to the decoder and the handler once; counters move per batch", () => {
    const ring = new FakeRing(1 << 16);
    // The first batch is the smallest (MIN_RECORDS_PER_BATCH): records and a short one that fill it exactly.
    const n = MIN_RECORDS_PER_BATCH - 1;
    for (let i = 0; i < n; i++) ring.push(record(i));
    ring.push(new Uint8Array(2));
    ring.push(record(n));
    const events: number[] = [];
    const batches: number[] = [];
    const errors: Error[] = [];
    const pump = new RecordPump(binding(ring), (e) => events.push(e), (e) => errors.push(e));
    pump.onBatch = (c) => batches.push(c);
    expect(pump.drain()).toBe(n + 1);
    expect(events).toEqual(Array.from({ length: n }, (_, i) => i));
    expect(batches).toEqual([n]);
    expect(pump.counters).toMatchObject({ received: n, decodeErrors: 1, handlerErrors: 0 });
    expect(errors).toEqual([]);
    expect(pump.drain()).toBe(1);
    expect(pump.drain()).toBe(0);
    expect(batches).toEqual([n, 1, 0]);
  });

  test("an event handler that throws: its records are skipped and counted, the first error of a batch is reported", () => {
    const ring = new FakeRing(1 << 16);
    for (let i = 0; i < 10; i++) ring.push(record(i));
    const events: number[] = [];
    const errors: Error[] = [];
    const pump = new RecordPump(binding(ring), (e) => {
      if (e % 3 === 0) throw new TypeError(`bad ${e}`);
      events.push(e);
    }, (e) => errors.push(e));
    pump.drain();
    expect(events).toEqual([1, 2, 4, 5, 7, 8]);
    expect(pump.counters).toMatchObject({ received: 6, decodeErrors: 0, handlerErrors: 4 });
    expect(errors.map((e) => e.message)).toEqual(["bad 0"]);
  });

  test("before close: every record of the ring is handed on in batches; with no time left they are read undecoded and returned", () => {
    const ring = new FakeRing(1 << 22);
    const total = 20_000;
    for (let i = 0; i < total; i++) ring.push(record(i));
    const events: number[] = [];
    const pump = new RecordPump(binding(ring), (e) => events.push(e), () => {});
    // Many batches (the first is MIN_RECORDS_PER_BATCH), in order, each record once.
    expect(pump.drainBeforeClose(60_000)).toBe(0);
    expect(events).toEqual(Array.from({ length: total }, (_, i) => i));
    expect(pump.counters.received).toBe(total);

    for (let i = 0; i < 500; i++) ring.push(record(i));
    expect(pump.drainBeforeClose(0)).toBe(500);
    expect(events).toHaveLength(total);
    expect(ring.consumer.pendingBytes!()).toBe(0);
    pump.close();
    ring.push(record(1));
    expect(pump.drainBeforeClose(60_000)).toBe(0);
  });

  test("polls on a timer, follows up at once while batches fill, never reads a record twice, then stops when closed", async () => {
    const ring = new FakeRing(1 << 24);
    const total = 70_000;
    for (let i = 0; i < total; i++) ring.push(record(i, 56));
    let next = 0;
    let outOfOrder = 0;
    const pump = new RecordPump(binding(ring), (e) => {
      if (e !== next) outOfOrder++;
      next = e + 1;
      // The first record costs 1 ms of the fake clock, so the turn that reads it has a measured length.
      if (e === 0) advanceTimersByTime(1);
    }, (e) => {
      throw e;
    });
    expect(pump.intervalMs).toBe(pollIntervalMs(1 << 24));
    // The shortest interval seen at a turn: read when the turn happens, since a later empty poll restores the base.
    let shortestIntervalMs = Infinity;
    pump.onTurn = () => {
      shortestIntervalMs = Math.min(shortestIntervalMs, pump.currentIntervalMs);
    };
    const own = timersOf("/src/ebpf/pump.ts");
    jest.useFakeTimers();
    try {
      pump.start();
      expect(own.count()).toBe(1);
      await advanceUntil(() => pump.counters.received === total, "all records", () => pump.currentIntervalMs);
      expect(outOfOrder).toBe(0);
      // 4.5 MB pending (> a quarter of the ring) at the first poll: it halved the interval.
      expect(shortestIntervalMs).toBeLessThan(pump.intervalMs);
      expect(pump.counters.turns).toBeGreaterThanOrEqual(2);
      expect(pump.counters.longestTurnMs).toBeGreaterThanOrEqual(1);
      await advanceUntil(() => pump.currentIntervalMs === pump.intervalMs, "interval back to its base once the ring is empty", () => pump.currentIntervalMs);
      pump.close();
      // Closed: no timer left, and a record written later is not read however long the clock runs.
      expect(own.count()).toBe(0);
      const turns = pump.counters.turns;
      ring.push(record(total));
      advanceTimersByTime(pump.intervalMs * 10);
      await nextTurn();
      expect(pump.counters.turns).toBe(turns);
      expect(pump.counters.received).toBe(total);
      expect(pump.drain()).toBe(0);
    } finally {
      jest.useRealTimers();
      own.restore();
    }
  });

  test("poll interval: a third of the ring at the peak producer rate, 1 to 25 ms", () => {
    expect(pollIntervalMs(16 * 1024 * 1024)).toBe(22);
    expect(pollIntervalMs(64 * 1024 * 1024)).toBe(25);
    expect(pollIntervalMs(2 * 1024 * 1024)).toBe(2);
    expect(pollIntervalMs(4096)).toBe(1);
  });

  test("poll interval adapts: halves while the ring is found over a quarter full, doubles back to the base while nearly empty", () => {
    expect(nextPollIntervalMs(22, 22, 0.3)).toBe(11);
    expect(nextPollIntervalMs(11, 22, 0.3)).toBe(5);
    expect(nextPollIntervalMs(1, 22, 0.9)).toBe(1);
    expect(nextPollIntervalMs(5, 22, 0.1)).toBe(5);
    expect(nextPollIntervalMs(5, 22, 0.01)).toBe(10);
    expect(nextPollIntervalMs(20, 22, 0)).toBe(22);
    expect(nextPollIntervalMs(22, 22, 0)).toBe(22);
  });

  test("idle stretch: after enough nearly-empty polls at the base, half the ring's fill time at the peak rate; busy or moderate polls bring it back", () => {
    const size = 16 * 1024 * 1024;
    // 16 MiB at 250 MB/s: half the ring in 33 ms (the base, a third, is 22 ms).
    expect(idlePollIntervalMs(size)).toBe(33);
    expect(idlePollIntervalMs(1 << 30)).toBe(50);
    expect(idlePollIntervalMs(4096)).toBe(pollIntervalMs(4096));
    expect(nextPollIntervalMs(22, 22, 0, 33, IDLE_POLLS_BEFORE_STRETCH - 1)).toBe(22);
    expect(nextPollIntervalMs(22, 22, 0, 33, IDLE_POLLS_BEFORE_STRETCH)).toBe(33);
    expect(nextPollIntervalMs(33, 22, 0, 33, IDLE_POLLS_BEFORE_STRETCH + 5)).toBe(33);
    expect(nextPollIntervalMs(10, 22, 0, 33, IDLE_POLLS_BEFORE_STRETCH + 5)).toBe(20);
    expect(nextPollIntervalMs(33, 22, 0.1, 33, 0)).toBe(22);
    expect(nextPollIntervalMs(33, 22, 0.3, 33, 0)).toBe(11);
  });

  test("one ticker polls several pumps from one timer; each ring drained in full and in order, the interval is the shortest wanted", async () => {
    const rings = [new FakeRing(1 << 24), new FakeRing(1 << 16), new FakeRing(1 << 16)];
    const totals = [70_000, 500, 0];
    rings.forEach((ring, r) => {
      for (let i = 0; i < totals[r]!; i++) ring.push(record(i, 56));
    });
    const ticker = new PollTicker();
    const next = [0, 0, 0];
    let outOfOrder = 0;
    const pumps = rings.map(
      (ring, r) =>
        new RecordPump(binding(ring), (e) => {
          if (e !== next[r]) outOfOrder++;
          next[r] = e + 1;
        }, (e) => {
          throw e;
        }),
    );
    const own = timersOf("/src/ebpf/pump.ts");
    jest.useFakeTimers();
    try {
      for (const p of pumps) p.start(ticker);
      expect(ticker.size).toBe(3);
      expect(ticker.intervalMs).toBe(Math.min(...pumps.map((p) => p.intervalMs)));
      // One timer for the three pumps.
      expect(own.count()).toBe(1);
      await advanceUntil(() => pumps.every((p, r) => p.counters.received === totals[r]), "all records of every ring", () => ticker.intervalMs);
      expect(outOfOrder).toBe(0);
      // The big ring needed follow-ups (70,000 records > one batch); every pump was polled at each timed tick.
      expect(pumps[0]!.counters.turns).toBeGreaterThan(pumps[2]!.counters.turns);
      expect(pumps[2]!.counters.turns).toBeGreaterThanOrEqual(ticker.ticks);
      rings[1]!.push(record(500, 56));
      await advanceUntil(() => pumps[1]!.counters.received === 501, "a record written later", () => ticker.intervalMs);
      for (const p of pumps) p.close();
      expect(ticker.size).toBe(0);
      expect(ticker.intervalMs).toBe(0);
      expect(own.count()).toBe(0);
      const ticks = ticker.ticks;
      rings[2]!.push(record(0, 56));
      advanceTimersByTime(pumps[2]!.intervalMs * 10);
      await nextTurn();
      expect(ticker.ticks).toBe(ticks);
      expect(pumps[2]!.counters.received).toBe(0);
    } finally {
      jest.useRealTimers();
      own.restore();
    }
  });

  test("a ring left idle stretches its interval, and the ticker's timer follows it", async () => {
    const ring = new FakeRing(1 << 21);
    const pump = new RecordPump(binding(ring), () => {}, (e) => {
      throw e;
    });
    // A small ring so the intervals are short: base 2 ms at 2 MiB, 4 ms once stretched.
    expect([pump.intervalMs, pump.idleIntervalMs]).toEqual([2, 4]);
    jest.useFakeTimers();
    try {
      const ticker = new PollTicker();
      pump.start(ticker);
      // Polls at the base interval until IDLE_POLLS_BEFORE_STRETCH empty ones, then at the stretched one.
      for (let i = 0; i < 100 && pump.counters.turns <= IDLE_POLLS_BEFORE_STRETCH; i++) advanceTimersByTime(pump.currentIntervalMs);
      expect(pump.counters.turns).toBeGreaterThan(IDLE_POLLS_BEFORE_STRETCH);
      expect(pump.currentIntervalMs).toBe(pump.idleIntervalMs);
      expect(ticker.intervalMs).toBe(pump.idleIntervalMs);
      pump.close();
    } finally {
      jest.useRealTimers();
    }
  });

  test("batch size: as many records as fit the turn budget at the measured cost, within bounds", () => {
    expect(batchRecords(20)).toBe(MAX_RECORDS_PER_BATCH);
    expect(batchRecords(100)).toBe((TURN_BUDGET_MS * 1e6) / 100);
    expect(batchRecords(1e6)).toBe(MIN_RECORDS_PER_BATCH);
    expect(batchRecords(0)).toBe(MAX_RECORDS_PER_BATCH);
    expect(batchRecords(Number.NaN)).toBe(MAX_RECORDS_PER_BATCH);
  });
});

describe("PollTicker: waiting while every ring is quiet", () => {
  class FakeWaiter implements ReadinessWait {
    broken: string | undefined;
    waits: Array<{ fds: readonly number[]; onReady: (woken: boolean) => void }> = [];
    cancels = 0;
    resets = 0;
    wait(fds: readonly number[], onReady: (woken: boolean) => void): void {
      this.waits.push({ fds, onReady });
    }
    cancel(): void {
      this.cancels++;
    }
    reset(): void {
      this.resets++;
    }
  }

  function pumpWithFd(ring: FakeRing, fd: number | undefined, events: number[]): RecordPump<number> {
    const reader = ring.consumer;
    if (fd !== undefined) Object.defineProperty(reader, "pollFd", { value: fd });
    return new RecordPump(binding(ring), (e) => events.push(e), (e) => {
      throw e;
    });
  }

  /**
   * Records filling `share` of a 64 KiB ring (120-byte payloads, 128 bytes with the header): an eighth is
   * MIN_RECORDS_PER_BATCH of them, what a pump's first turn reads.
   */
  const RECORD_PAYLOAD = 120;
  const recordsFor = (share: number) => Math.ceil((share * (1 << 16)) / (RECORD_PAYLOAD + 8));

  test("after QUIET_TICKS_BEFORE_WAIT quiet ticks the rings' fds go to the waiter and the timer slows; each end of a wait reads at once and waits again while quiet", () => {
    const rings = [new FakeRing(1 << 16), new FakeRing(1 << 16)];
    const events: number[] = [];
    const pumps = rings.map((r, i) => pumpWithFd(r, 40 + i, events));
    const waiter = new FakeWaiter();
    const own = timersOf("/src/ebpf/pump.ts");
    jest.useFakeTimers();
    try {
      const ticker = new PollTicker({ open: () => waiter });
      for (const p of pumps) p.start(ticker);
      for (let i = 0; i < QUIET_TICKS_BEFORE_WAIT; i++) {
        // A trickle is quiet: a record now and then does not keep the timer going.
        rings[0]!.push(record(100 + i));
        advanceTimersByTime(ticker.intervalMs);
      }
      expect(ticker.ticks).toBe(QUIET_TICKS_BEFORE_WAIT);
      expect(ticker.waiting).toBe(true);
      expect(waiter.waits.map((w) => w.fds)).toEqual([[40, 41]]);
      expect(ticker.intervalMs).toBe(WAITING_POLL_INTERVAL_MS);
      expect(own.count()).toBe(1);
      // The wait's timeout: what trickled in is read, and the ticker waits again at once.
      rings[1]!.push(record(7));
      waiter.waits[0]!.onReady(false);
      expect(events).toEqual([100, 101, 102, 103, 7]);
      expect([ticker.waiting, ticker.timeouts, ticker.wakeups, waiter.waits.length]).toEqual([true, 1, 0, 2]);
      // The kernel's wakeup (a ring reached its share): read at once; a busy ring brings the timer back.
      for (let i = 0; i < recordsFor(1 / 8); i++) rings[1]!.push(record(1000 + i, RECORD_PAYLOAD));
      waiter.waits[1]!.onReady(true);
      expect(events.length).toBe(5 + recordsFor(1 / 8));
      expect([ticker.waiting, ticker.wakeups]).toEqual([false, 1]);
      expect(ticker.intervalMs).toBe(Math.min(...pumps.map((p) => p.currentIntervalMs)));
      // A stale end of a wait changes nothing.
      waiter.waits[1]!.onReady(true);
      expect(ticker.wakeups).toBe(1);
      for (const p of pumps) p.close();
      expect(own.count()).toBe(0);
    } finally {
      jest.useRealTimers();
      own.restore();
    }
  });

  test("a busy ring found by the fallback tick while waiting: the wait is cancelled and polling on the timer resumes", () => {
    const ring = new FakeRing(1 << 16);
    const events: number[] = [];
    const pump = pumpWithFd(ring, 9, events);
    const waiter = new FakeWaiter();
    jest.useFakeTimers();
    try {
      const ticker = new PollTicker({ open: () => waiter });
      pump.start(ticker);
      for (let i = 0; i < QUIET_TICKS_BEFORE_WAIT; i++) advanceTimersByTime(ticker.intervalMs);
      expect(ticker.waiting).toBe(true);
      for (let i = 0; i < recordsFor(1 / 8); i++) ring.push(record(i, RECORD_PAYLOAD));
      advanceTimersByTime(WAITING_POLL_INTERVAL_MS);
      expect(events.length).toBe(recordsFor(1 / 8));
      expect(ticker.waiting).toBe(false);
      expect(waiter.cancels).toBe(1);
      expect(ticker.intervalMs).toBe(pump.currentIntervalMs);
      // Adding or removing a pump while waiting cancels the wait too (its fds change), and the waiter watches the
      // fds afresh (a closed ring's fd number may come back as the next set's ring).
      for (let i = 0; i < QUIET_TICKS_BEFORE_WAIT; i++) advanceTimersByTime(ticker.intervalMs);
      expect(ticker.waiting).toBe(true);
      const resets = waiter.resets;
      pump.close();
      expect(waiter.cancels).toBe(2);
      expect(waiter.resets).toBe(resets + 1);
      expect(ticker.waiting).toBe(false);
    } finally {
      jest.useRealTimers();
    }
  });

  test("no waiting where a pump has no fd, where the waiter cannot be opened (said once), or after it broke", () => {
    // Closed at the end: a pump left started keeps its ticker's timer.
    const pumps: RecordPump<number>[] = [];
    const started = (p: RecordPump<number>, ticker: PollTicker) => {
      pumps.push(p);
      p.start(ticker);
    };
    jest.useFakeTimers();
    try {
      const events: number[] = [];
      const noFd = new PollTicker({ open: () => new FakeWaiter() });
      started(pumpWithFd(new FakeRing(1 << 16), 5, events), noFd);
      started(pumpWithFd(new FakeRing(1 << 16), undefined, events), noFd);
      for (let i = 0; i < 3 * QUIET_TICKS_BEFORE_WAIT; i++) advanceTimersByTime(noFd.intervalMs);
      expect([noFd.waiting, noFd.waits]).toEqual([false, 0]);

      const reasons: string[] = [];
      const failing = new PollTicker({
        open: () => {
          throw new Error("no TinyCC here");
        },
        onUnavailable: (r) => reasons.push(r),
      });
      started(pumpWithFd(new FakeRing(1 << 16), 6, events), failing);
      for (let i = 0; i < 3 * QUIET_TICKS_BEFORE_WAIT; i++) advanceTimersByTime(failing.intervalMs);
      expect([failing.waiting, failing.waits, reasons]).toEqual([false, 0, ["no TinyCC here"]]);

      const waiter = new FakeWaiter();
      const broken = new PollTicker({ open: () => waiter, onUnavailable: (r) => reasons.push(r) });
      started(pumpWithFd(new FakeRing(1 << 16), 7, events), broken);
      for (let i = 0; i < QUIET_TICKS_BEFORE_WAIT; i++) advanceTimersByTime(broken.intervalMs);
      expect(broken.waiting).toBe(true);
      waiter.broken = "the waiting thread ended";
      waiter.waits[0]!.onReady(false);
      for (let i = 0; i < 3 * QUIET_TICKS_BEFORE_WAIT; i++) advanceTimersByTime(broken.intervalMs);
      expect([broken.waiting, broken.waits, reasons]).toEqual([false, 1, ["no TinyCC here", "the waiting thread ended"]]);
      expect(events).toEqual([]);
    } finally {
      for (const p of pumps) p.close();
      jest.useRealTimers();
    }
  });
});
