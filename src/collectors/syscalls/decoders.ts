/**
 * Pure decoders of the `syscalls` set's map entries (ffi/bpf/syscalls.bpf.c): `struct sc_key` and
 * `struct sc_stats`, offsets next to the C struct. Little-endian (the kernel's byte order on x86_64 and arm64).
 */

/** Latency buckets per entry (SC_BUCKETS). */
export const SC_BUCKETS = 24;
/** Bucket i < SC_BUCKETS - 1 counts latencies below 2^(SC_FIRST_BOUND_LOG2 + i) ns (SC_FIRST_BOUND_LOG2). */
export const SC_FIRST_BOUND_LOG2 = 10;
export const SC_KEY_BYTES = 8;
/** Syscall numbers below this are moved into `exited_stats` when their process ends (SC_MAX_NR). */
export const SC_MAX_NR = 512;
/** A process that ends having made fewer calls is folded into `exited_stats` by the kernel (`fold_below_calls`). */
export const SC_FOLD_BELOW_CALLS = 1000;
/** Why a call was not counted, by index of the `dropped` map: `syscall_stats` full, `inflight` full. */
export const SC_DROP_REASONS = ["stats_full", "inflight_full"] as const;
export const SC_STATS_BYTES = 24 + 8 * SC_BUCKETS;

const KEY = { tgid: 0, nr: 4 } as const;
const STATS = { count: 0, errors: 8, totalNs: 16, buckets: 24 } as const;

export interface SyscallKey {
  tgid: number;
  nr: number;
}

export interface SyscallStats {
  count: number;
  errors: number;
  totalNs: number;
  /** SC_BUCKETS counts. */
  buckets: number[];
}

/** Upper bounds of the latency buckets in seconds (SC_BUCKETS - 1 of them; the last bucket is unbounded). */
export const SC_BOUNDS_SECONDS: readonly number[] = Array.from({ length: SC_BUCKETS - 1 }, (_, i) => 2 ** (SC_FIRST_BOUND_LOG2 + i) / 1e9);

export function decodeSyscallKey(view: DataView, offset = 0): SyscallKey {
  if (view.byteLength - offset < SC_KEY_BYTES) throw new RangeError(`sc_key: ${view.byteLength - offset} bytes, need ${SC_KEY_BYTES}`);
  return { tgid: view.getUint32(offset + KEY.tgid, true), nr: view.getUint32(offset + KEY.nr, true) };
}

export function encodeSyscallKey(k: SyscallKey): Uint8Array {
  const b = new Uint8Array(SC_KEY_BYTES);
  const v = new DataView(b.buffer);
  v.setUint32(KEY.tgid, k.tgid, true);
  v.setUint32(KEY.nr, k.nr, true);
  return b;
}

export function decodeSyscallStats(view: DataView, offset = 0): SyscallStats {
  if (view.byteLength - offset < SC_STATS_BYTES) throw new RangeError(`sc_stats: ${view.byteLength - offset} bytes, need ${SC_STATS_BYTES}`);
  const u64 = (at: number) => Number(view.getBigUint64(offset + at, true));
  const buckets: number[] = [];
  for (let i = 0; i < SC_BUCKETS; i++) buckets.push(u64(STATS.buckets + 8 * i));
  return { count: u64(STATS.count), errors: u64(STATS.errors), totalNs: u64(STATS.totalNs), buckets };
}
