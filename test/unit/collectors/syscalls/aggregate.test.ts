import { describe, expect, test } from "bun:test";
import { METRIC_COUNT, METRIC_DURATION, METRIC_ERRORS, SyscallAggregator, type SyscallEntry } from "../../../../src/collectors/syscalls/aggregate";
import { decodeSyscallKey, decodeSyscallStats, encodeSyscallKey, SC_BOUNDS_SECONDS, SC_BUCKETS, SC_STATS_BYTES } from "../../../../src/collectors/syscalls/decoders";
import { syscallName } from "../../../../src/collectors/syscalls/names";
import type { MetricPointItem } from "../../../../src/export/model";

function entry(tgid: number, nr: number, count: number, errors = 0): SyscallEntry {
  const buckets = new Array<number>(SC_BUCKETS).fill(0);
  buckets[2] = count;
  return { key: { tgid, nr }, stats: { count, errors, totalNs: count * 1500, buckets } };
}

const opts = (top: number) => ({
  topProcesses: top,
  syscallName: (nr: number) => syscallName("x64", nr),
  processAttributes: (pid: number) => ({ "process.executable.name": `p${pid}` }),
  startTimeUnixNano: 1n,
  timeUnixNano: 2n,
});

const value = (pts: MetricPointItem[], name: string, where: Record<string, unknown>) =>
  pts.filter((p) => p.name === name && Object.entries(where).every(([k, v]) => p.attributes![k] === v)).reduce((s, p) => s + (p.type === "histogram" ? p.count : p.value), 0);

describe("syscall aggregation", () => {
  test("deltas per interval; top N processes by calls, the rest as other", () => {
    const a = new SyscallAggregator();
    const first = a.collect([entry(1, 0, 100), entry(2, 0, 50, 5), entry(3, 39, 10), entry(4, 39, 1)], opts(2));
    expect(value(first, METRIC_COUNT, { "process.pid": 1, "syscall.name": "read" })).toBe(100);
    expect(value(first, METRIC_ERRORS, { "process.pid": 2, "syscall.name": "read" })).toBe(5);
    expect(value(first, METRIC_COUNT, { "process.executable.name": "other", "syscall.name": "getpid" })).toBe(11);
    expect(value(first, METRIC_DURATION, { "process.pid": 1 })).toBe(100);
    const h = first.find((p) => p.type === "histogram")!;
    expect(h.type === "histogram" && h.bucketCounts.length).toBe(h.type === "histogram" ? h.explicitBounds.length + 1 : 0);
    const second = a.collect([entry(1, 0, 100), entry(2, 0, 80, 5), entry(3, 39, 10), entry(4, 39, 1)], opts(2));
    expect(value(second, METRIC_COUNT, {})).toBe(30);
    expect(value(second, METRIC_COUNT, { "process.pid": 2 })).toBe(30);
    expect(value(second, METRIC_ERRORS, { "process.pid": 2 })).toBe(0);
  });

  test("a forgotten entry (pid reused) starts from zero", () => {
    const a = new SyscallAggregator();
    a.collect([entry(7, 1, 40)], opts(5));
    a.forget({ tgid: 7, nr: 1 });
    expect(value(a.collect([entry(7, 1, 3)], opts(5)), METRIC_COUNT, { "process.pid": 7 })).toBe(3);
  });

  test("map values decode at the C offsets; names for both architectures", () => {
    const v = new DataView(new ArrayBuffer(SC_STATS_BYTES));
    v.setBigUint64(0, 10n, true);
    v.setBigUint64(8, 2n, true);
    v.setBigUint64(16, 12345n, true);
    v.setBigUint64(24 + 8 * 23, 4n, true);
    const s = decodeSyscallStats(v);
    expect([s.count, s.errors, s.totalNs, s.buckets[23], s.buckets.length]).toEqual([10, 2, 12345, 4, SC_BUCKETS]);
    const k = encodeSyscallKey({ tgid: 99, nr: 231 });
    expect(decodeSyscallKey(new DataView(k.buffer))).toEqual({ tgid: 99, nr: 231 });
    expect(SC_BOUNDS_SECONDS[0]).toBeCloseTo(1.024e-6);
    expect([syscallName("x64", 0), syscallName("x64", 59), syscallName("x64", 231), syscallName("arm64", 63), syscallName("arm64", 221), syscallName("arm64", 25)]).toEqual(["read", "execve", "exit_group", "read", "execve", "fcntl"]);
    expect(syscallName("x64", 9999)).toBe("syscall_9999");
  });
});

describe("processes that ended (the kernel's exited_stats totals)", () => {
  const exited = (nr: number, count: number) => entry(0, nr, count);

  test("the growth of the totals, less what was already exported from the moved entries, is counted in other once", () => {
    const a = new SyscallAggregator();
    const first = a.collect([entry(5, 39, 10), entry(6, 39, 4)], opts(5), []);
    expect(value(first, METRIC_COUNT, { "process.pid": 5 })).toBe(10);
    // pid 5 made 3 more calls and ended: the kernel moved its 13 calls into the totals; pid 6's entry is still there.
    const second = a.collect([entry(6, 39, 4)], opts(5), [exited(39, 13)]);
    expect(value(second, METRIC_COUNT, { "process.executable.name": "other", "syscall.name": "getpid" })).toBe(3);
    expect(value(second, METRIC_DURATION, { "process.executable.name": "other" })).toBe(3);
    // A process born and ended within the interval: all its calls are new.
    const third = a.collect([entry(6, 39, 4)], opts(5), [exited(39, 13 + 7)]);
    expect(value(third, METRIC_COUNT, {})).toBe(7);
    expect(value(a.collect([entry(6, 39, 4)], opts(5), [exited(39, 20)]), METRIC_COUNT, {})).toBe(0);
  });

  test("a move the totals read does not show yet is subtracted from their next growth: every call counted once", () => {
    const a = new SyscallAggregator();
    let counted = value(a.collect([entry(5, 39, 10), entry(6, 39, 4)], opts(5), []), METRIC_COUNT, {});
    // pid 5 (13 calls) was moved after the totals were read: gone from the entries, not yet in the totals.
    counted += value(a.collect([entry(6, 39, 4)], opts(5), []), METRIC_COUNT, {});
    // pid 6 (4 calls) moved and was read with pid 5's move; a new process of 2 calls too.
    counted += value(a.collect([], opts(5), [exited(39, 13 + 4 + 2)]), METRIC_COUNT, {});
    expect(counted).toBe(13 + 4 + 2);
    expect(value(a.collect([], opts(5), [exited(39, 19)]), METRIC_COUNT, {})).toBe(0);
  });

  test("an entry user space deleted itself (forgotten) is not subtracted from the totals", () => {
    const a = new SyscallAggregator();
    a.collect([entry(5, 39, 10)], opts(5), []);
    a.forget({ tgid: 5, nr: 39 });
    expect(value(a.collect([], opts(5), [exited(39, 2)]), METRIC_COUNT, { "process.executable.name": "other" })).toBe(2);
  });
});
