/**
 * RingConsumer (the walk of ffi/ring-buffer.ts's mmapped reader) over plain buffers laid out as the kernel maps a
 * BPF ring buffer: the data area written twice (double mapping), 8-byte headers with BUSY and DISCARD bits.
 */
import { describe, expect, test } from "bun:test";
import { FakeRing, record } from "../../helpers/fakes/ring";

/** Decodes the record's number and checks every payload byte (so a record read across the wrap must be whole). */
function decodeChecked(v: DataView, o: number, len: number): number {
  if (len < 4) throw new RangeError(`short record: ${len}`);
  const n = v.getUint32(o, true);
  for (let i = 4; i < len; i++) if (v.getUint8(o + i) !== ((n + i) & 0xff)) throw new Error(`record ${n} corrupt at byte ${i}`);
  return n;
}

function readAll(ring: FakeRing, max = 1 << 20, errors: unknown[] = []): number[] {
  const out: number[] = [];
  ring.consumer.consumeDecoded(decodeChecked, (n) => out.push(n), max, (e) => errors.push(e));
  return out;
}

describe("RingConsumer", () => {
  test("reads committed records in order and publishes the consumer position once read", () => {
    const ring = new FakeRing(4096);
    for (let i = 0; i < 10; i++) ring.push(record(i, 20));
    expect(ring.consumer.pendingBytes()).toBe(10 * 32);
    expect(readAll(ring)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(ring.consumerPos[0]).toBe(ring.producerPos[0]);
    expect(ring.consumer.pendingBytes()).toBe(0);
    expect(readAll(ring)).toEqual([]);
  });

  test("a record that wraps past the end of the data area reads whole through the second mapping", () => {
    const ring = new FakeRing(256);
    const seen: number[] = [];
    // 48-byte slots: the 6th starts at 240 and runs 32 bytes past the end; go round the ring several times.
    for (let i = 0; i < 40; i++) {
      ring.push(record(i, 40));
      if (i % 3 === 2) seen.push(...readAll(ring));
    }
    seen.push(...readAll(ring));
    expect(seen).toEqual(Array.from({ length: 40 }, (_, i) => i));
  });

  test("discarded records are skipped (not handed out, not counted) and consumed", () => {
    const ring = new FakeRing(4096);
    ring.push(record(1));
    ring.push(record(2), { discard: true });
    ring.push(record(3));
    const out: number[] = [];
    const n = ring.consumer.consumeDecoded(decodeChecked, (x) => out.push(x), 100, () => {});
    expect(out).toEqual([1, 3]);
    expect(n).toBe(2);
    expect(ring.consumerPos[0]).toBe(ring.producerPos[0]);
  });

  test("a busy record stops the walk there; it is read once committed", () => {
    const ring = new FakeRing(4096);
    ring.push(record(1));
    const busy = ring.push(record(2), { commit: false });
    ring.push(record(3));
    expect(readAll(ring)).toEqual([1]);
    expect(ring.consumerPos[0]).toBe(busy);
    expect(readAll(ring)).toEqual([]);
    ring.commit(busy, 16);
    expect(readAll(ring)).toEqual([2, 3]);
  });

  test("maxRecords bounds a walk; the rest is read by the next", () => {
    const ring = new FakeRing(4096);
    for (let i = 0; i < 7; i++) ring.push(record(i));
    expect(readAll(ring, 3)).toEqual([0, 1, 2]);
    expect(ring.consumerPos[0]).toBe(3n * 24n);
    expect(readAll(ring, 3)).toEqual([3, 4, 5]);
    expect(readAll(ring, 3)).toEqual([6]);
  });

  test("a record whose decoder throws is consumed and reported; the records after it are read in the same call, none twice", () => {
    const ring = new FakeRing(4096);
    ring.push(record(1));
    ring.push(new Uint8Array(2));
    ring.push(record(3));
    const bad = record(4);
    bad[7] = bad[7]! ^ 0xff;
    ring.push(bad);
    ring.push(record(5));
    const errors: unknown[] = [];
    const out: number[] = [];
    const n = ring.consumer.consumeDecoded(decodeChecked, (x) => out.push(x), 100, (e) => errors.push(e));
    expect(out).toEqual([1, 3, 5]);
    expect(n).toBe(5);
    expect(errors.map((e) => (e as Error).constructor.name)).toEqual(["RangeError", "Error"]);
    expect(ring.consumerPos[0]).toBe(ring.producerPos[0]);
    expect(readAll(ring)).toEqual([]);
  });

  test("a throwing sink skips only its record; a throw on the last allowed record ends the call at maxRecords", () => {
    const ring = new FakeRing(4096);
    for (let i = 0; i < 5; i++) ring.push(record(i));
    const out: number[] = [];
    const sink = (x: number) => {
      if (x === 1) throw new Error("handler bug");
      out.push(x);
    };
    expect(ring.consumer.consumeDecoded(decodeChecked, sink, 2, () => {})).toBe(2);
    expect(out).toEqual([0]);
    expect(ring.consumer.consumeDecoded(decodeChecked, sink, 10, () => {})).toBe(3);
    expect(out).toEqual([0, 2, 3, 4]);
  });

  test("consume() with a record handler: the handler's error propagates, its record is not read again", () => {
    const ring = new FakeRing(4096);
    for (let i = 0; i < 3; i++) ring.push(record(i));
    const seen: number[] = [];
    const handler = (v: DataView, o: number) => {
      const n = v.getUint32(o, true);
      seen.push(n);
      if (n === 1) throw new Error("boom");
    };
    expect(() => ring.consumer.consume(handler)).toThrow("boom");
    expect(ring.consumer.consume(handler)).toBe(1);
    expect(seen).toEqual([0, 1, 2]);
  });

  test("positions far past 2^32 (a long-running agent) read the same", () => {
    const start = (1n << 40n) + 4096n * 5n + 200n;
    const ring = new FakeRing(4096, start);
    const out: number[] = [];
    for (let i = 0; i < 500; i++) {
      ring.push(record(i, 36));
      if (i % 50 === 49) out.push(...readAll(ring));
    }
    expect(out).toEqual(Array.from({ length: 500 }, (_, i) => i));
    expect(ring.consumerPos[0]).toBe(start + 500n * 48n);
  });
});
