/**
 * The backlog a pump holds in memory when its decoder falls behind: SpillQueue keeps records in ring order across
 * chunks; RecordPump moves a ring more than SPILL_FILL_FRACTION full into it, decodes from it oldest first while
 * later records queue behind, bounds it, and holds nothing more while the memory limiter refuses.
 */
import { describe, expect, test } from "bun:test";
import type { ReaderBinding } from "../../../src/ebpf/loader";
import { MIN_RECORDS_PER_BATCH, RecordPump, SPILL_FILL_FRACTION, spillLimitBytes } from "../../../src/ebpf/pump";
import { SpillQueue } from "../../../src/ebpf/spill";
import { FakeRing, record } from "../../helpers/fakes/ring";

const decode = (v: DataView, o: number, len: number): number => {
  if (len < 4) throw new RangeError(`short: ${len}`);
  return v.getUint32(o, true);
};
const RETHROW = (e: unknown) => {
  throw e;
};

/** `length` bytes (at least 4: `value` first; fewer: a record too short to decode), the last one 0xab. */
function bytesOf(value: number, length: number): DataView {
  const b = new Uint8Array(length);
  if (length >= 4) new DataView(b.buffer).setUint32(0, value, true);
  b[length - 1] = 0xab;
  return new DataView(b.buffer);
}

describe("SpillQueue", () => {
  test("records come out in the order they went in, whole, across chunks and past a record longer than a chunk", () => {
    const q = new SpillQueue();
    const lengths = [8, 3_000_000, ...Array.from({ length: 5000 }, (_, i) => 300 + (i % 700))];
    lengths.forEach((len, i) => q.push(bytesOf(i, len), 0, len));
    expect(q.size).toBe(lengths.length);
    expect(q.bytes).toBe(lengths.reduce((s, l) => s + l + 4, 0));
    const seen: Array<[number, number, number]> = [];
    const sink = (x: [number, number, number]) => seen.push(x);
    const read = (v: DataView, o: number, len: number): [number, number, number] => [v.getUint32(o, true), len, v.getUint8(o + len - 1)];
    expect(q.take(read, sink, 2, RETHROW)).toBe(2);
    expect(q.take(read, sink, 1_000_000, RETHROW)).toBe(lengths.length - 2);
    expect(seen.map(([v]) => v)).toEqual(lengths.map((_, i) => i));
    expect(seen.every(([, len, last], i) => len === lengths[i] && last === 0xab)).toBe(true);
    expect([q.size, q.bytes]).toEqual([0, 0]);
    expect(q.take(read, sink, 10, RETHROW)).toBe(0);
  });

  test("a record whose decoder or handler throws is gone, its error reported, and the next ones follow", () => {
    const q = new SpillQueue();
    for (let i = 0; i < 6; i++) q.push(bytesOf(i, i === 2 ? 2 : 8), 0, i === 2 ? 2 : 8);
    const out: number[] = [];
    const errors: unknown[] = [];
    const n = q.take(decode, (e) => {
      if (e === 4) throw new TypeError("bad 4");
      out.push(e);
    }, 100, (e) => errors.push(e));
    expect(n).toBe(6);
    expect(out).toEqual([0, 1, 3, 5]);
    expect(errors.map((e) => (e as Error).constructor.name)).toEqual(["RangeError", "TypeError"]);
  });

  test("clear drops everything it held", () => {
    const q = new SpillQueue();
    for (let i = 0; i < 10; i++) q.push(bytesOf(i, 16), 0, 16);
    expect(q.clear()).toBe(10);
    expect([q.size, q.bytes]).toEqual([0, 0]);
  });
});

function binding(ring: FakeRing): ReaderBinding<number> {
  return { map: "events", kind: "ringbuf", reader: ring.consumer, lostMap: undefined, decode, sizeBytes: ring.size };
}

/** Records of 64 bytes in the ring (56-byte payloads) filling `share` of a ring of `size`. */
const fill = (ring: FakeRing, first: number, share: number) => {
  const n = Math.ceil((share * ring.size) / 64);
  for (let i = 0; i < n; i++) ring.push(record(first + i, 56));
  return n;
};

describe("RecordPump's backlog in memory", () => {
  test("a ring found over SPILL_FILL_FRACTION full is emptied at once; its records and later ones are handed in order, once each", () => {
    const ring = new FakeRing(1 << 16);
    const events: number[] = [];
    const pump = new RecordPump(binding(ring), (e) => events.push(e), RETHROW);
    const first = fill(ring, 0, SPILL_FILL_FRACTION + 0.1);
    expect(pump.drain()).toBe(MIN_RECORDS_PER_BATCH);
    // The whole ring moved into memory: the kernel has its room back while the decoder works through it.
    expect(ring.consumer.pendingBytes()).toBe(0);
    expect(pump.counters.spilled).toBe(first);
    expect(pump.backlog).toBe(first - MIN_RECORDS_PER_BATCH);
    expect(pump.counters.spillPeakBytes).toBe(first * (56 + 4));
    // While a backlog is held, new records queue behind it (never overtaking older ones).
    const later = fill(ring, first, 0.05);
    let turns = 0;
    while (pump.backlog > 0 || ring.consumer.pendingBytes() > 0) {
      pump.drain();
      if (++turns > 1000) throw new Error("backlog never emptied");
    }
    expect(events).toEqual(Array.from({ length: first + later }, (_, i) => i));
    expect(pump.counters.spilled).toBe(first + later);
    expect(pump.counters.received).toBe(first + later);
    // Caught up: the next records are read from the ring again.
    fill(ring, first + later, 0.01);
    const spilled = pump.counters.spilled;
    pump.drain();
    expect(pump.counters.spilled).toBe(spilled);
  });

  test("nothing moves when the backlog would pass its bound, or while the memory limiter refuses: records wait in the ring", () => {
    const ring = new FakeRing(1 << 16);
    const events: number[] = [];
    const pump = new RecordPump(binding(ring), (e) => events.push(e), RETHROW);
    expect(spillLimitBytes(1 << 16)).toBe(8 << 16);
    expect(spillLimitBytes(1 << 30)).toBe(64 * 2 ** 20);
    pump.spillAllowed = () => false;
    const n = fill(ring, 0, 0.75);
    pump.drain();
    expect([pump.counters.spilled, pump.backlog]).toEqual([0, 0]);
    expect(ring.consumer.pendingBytes()).toBe((n - MIN_RECORDS_PER_BATCH) * 64);
    // Allowed again: what the ring holds moves into memory, and the turn hands the oldest of it.
    pump.spillAllowed = () => true;
    pump.drain();
    expect(pump.counters.spilled).toBe(n - MIN_RECORDS_PER_BATCH);
    expect(ring.consumer.pendingBytes()).toBe(0);
    // Filled up to its bound (8 rings), the backlog takes no more: the ring keeps what does not fit.
    let next = n;
    while (pump.backlog * 60 + 0.75 * ring.size <= spillLimitBytes(ring.size)) {
      next += fill(ring, next, 0.75);
      pump.drain();
    }
    const held = pump.backlog;
    next += fill(ring, next, 0.75);
    pump.drain();
    expect(pump.backlog).toBe(held - MIN_RECORDS_PER_BATCH);
    expect(ring.consumer.pendingBytes()).toBeGreaterThan(0);
    // Closing frees the backlog.
    pump.close();
    expect(pump.backlog).toBe(0);
    expect(new Set(events).size).toBe(events.length);
    expect(events).toEqual(Array.from({ length: events.length }, (_, i) => i));
  });
});
