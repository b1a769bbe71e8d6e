/**
 * Kernel timestamps (bpf_ktime_get_ns, CLOCK_MONOTONIC) to Unix epoch nanoseconds. The offset is measured
 * once from /proc/timer_list's "now at N nsecs" line (CLOCK_MONOTONIC) read between two readings of the
 * wall clock (about 20 us apart here); without it, from the first event's arrival (less exact).
 */
import { closeSync, openSync, readSync } from "node:fs";

const TIMER_LIST_PATH = "/proc/timer_list";
const TIMER_LIST_HEAD_BYTES = 256;

function epochNowNs(): bigint {
  return BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));
}

/** CLOCK_MONOTONIC now in ns from /proc/timer_list, with the wall clock at that moment; undefined when unreadable. */
export function measureMonotonicOffset(path = TIMER_LIST_PATH): bigint | undefined {
  let fd: number | undefined;
  try {
    fd = openSync(path, "r");
    const buf = Buffer.alloc(TIMER_LIST_HEAD_BYTES);
    const before = epochNowNs();
    const n = readSync(fd, buf, 0, buf.length, 0);
    const after = epochNowNs();
    const m = /now at (\d+) nsecs/.exec(buf.subarray(0, n).toString("latin1"));
    if (!m) return undefined;
    return (before + after) / 2n - BigInt(m[1]!);
  } catch {
    return undefined;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

export class KernelClock {
  #offsetNs: bigint | undefined;

  constructor(offsetNs: bigint | undefined = measureMonotonicOffset()) {
    this.#offsetNs = offsetNs;
  }

  /** Epoch ns of a kernel monotonic timestamp. */
  toEpochNs(monotonicNs: bigint): bigint {
    if (this.#offsetNs === undefined) this.#offsetNs = epochNowNs() - monotonicNs;
    return monotonicNs + this.#offsetNs;
  }

  /** Epoch ns now. */
  nowEpochNs(): bigint {
    return epochNowNs();
  }
}
