/**
 * The kernel side of the RED metrics (ffi/bpf/network.bpf.c, "RED metrics"; ffi/bpf/red.h): writes `red_config`
 * (generation and histogram bounds), and takes what the kernel counted: it flips the generation, lets programs
 * already running on the old one finish, then takes the old generation: its key index (`red_idx_*`, key -> slot)
 * whole (lookup-and-delete), the per-CPU counts of each slot given out (`red_vals_*`, up to `red_next`), summed over
 * CPUs and zeroed, and resets its slot counter. Keys that found no room are read from `red_overflow` as
 * differences of its cumulative counts. Responses still moving after their generation was taken (a download or a
 * stream across the one-second flip) leave their duration's growth in `red_moves`, by key and generation counted
 * in: taken with each generation and given to the aggregator as entries without a count while that generation
 * belongs to the metrics interval not exported yet (`closeInterval` marks where the next begins), dropped after.
 * Decoders are pure; offsets mirror the C structs (asserted there).
 */
import type { BpfMapApi, BpfObjectApi } from "../../../ffi/types";
import { formatAddress } from "./addresses";

export const RED_KEY_BYTES = 40;
export const RED_VALUE_BYTES = 88;
/** struct red_body_value (ffi/bpf/red-body.h): the request's red_value, then the response's. */
export const RED_BODY_VALUE_BYTES = 2 * RED_VALUE_BYTES;
const RED_BODY_CONFIG_BYTES = 8 + 8 * 16;
/** RED_MAX_BOUNDS in the C program. */
export const RED_MAX_BOUNDS = 16;
export const RED_BUCKETS = RED_MAX_BOUNDS + 1;
const RED_CONFIG_BYTES = 8 + 8 * RED_MAX_BOUNDS + 8 + 8;
/** Offset of red_config_value.open_gen. */
const RED_CONFIG_OPEN_GEN = 8 + 8 * RED_MAX_BOUNDS + 8;
/** struct red_move_key: a red_key and the generation its exchange was counted in. */
const RED_MOVE_KEY_BYTES = RED_KEY_BYTES + 8;
/** RED_PATH_OVERFLOW in the C program: the path hash of paths beyond the kernel's per-generation room. */
export const RED_PATH_OVERFLOW = 1n;
/** RED_PATH_BYTES in the C program. */
export const RED_PATH_BYTES = 64;
/** Keys taken per batch call at most. */
const TAKE_BATCH_KEYS = 4096;
/** RED_MAX_KEYS in the C program: slots per generation. */
export const RED_MAX_KEYS = 4096;
/** Programs that read the old generation just before the flip finish within microseconds. */
const FLIP_GRACE_MS = 1;

/** METHOD_* in the C program, by index. */
export const RED_METHODS = ["_OTHER", "GET", "POST", "PUT", "HEAD", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"] as const;

/** A request method as the RED series name it: one of RED_METHODS, `_OTHER` for the rest. */
export function redMethod(method: string): string {
  return (RED_METHODS as readonly string[]).includes(method) ? method : "_OTHER";
}
export const Role = { SERVER: 1, CLIENT: 2 } as const;
export type RoleValue = (typeof Role)[keyof typeof Role];

const KEY = { pathHash: 0, pid: 8, status: 12, method: 14, role: 15, peer: 16, peerPort: 32, family: 34, scheme: 36 } as const;
/** RED_SCHEME_HTTPS in the C program: counted by the TLS capture. */
const RED_SCHEME_HTTPS = 1;

export interface RedKey {
  /** Server: the hash of the path (0: no path; RED_PATH_OVERFLOW: a new path beyond the kernel's room); client: 0. */
  pathHash: bigint;
  pid: number;
  /** HTTP status code. */
  status: number;
  method: string;
  role: RoleValue;
  /** Client: the server's address; server: the client's when loopback or private, else "" (public). */
  peer: string;
  /** Client: the server's port; server: the local port. */
  peerPort: number;
  /** Counted by the TLS capture (url.scheme https); absent for cleartext. */
  scheme?: "https";
}

export interface RedCounts {
  count: number;
  sumNs: number;
  /** RED_BUCKETS counts (the configured bounds use the first nbounds + 1). */
  buckets: number[];
}

export interface RedEntry extends RedCounts {
  key: RedKey;
}

/** Body sizes of one key (sums in bytes). */
export interface RedBodyEntry {
  key: RedKey;
  request: RedCounts;
  response: RedCounts;
}

export function decodeRedKey(b: Uint8Array, off = 0): RedKey {
  const v = new DataView(b.buffer, b.byteOffset + off, RED_KEY_BYTES);
  const family = v.getUint16(KEY.family, true);
  const peerBytes = b.subarray(off + KEY.peer, off + KEY.peer + 16);
  const role = v.getUint8(KEY.role) === Role.CLIENT ? Role.CLIENT : Role.SERVER;
  const zero = peerBytes.every((x) => x === 0);
  return {
    pathHash: v.getBigUint64(KEY.pathHash, true),
    pid: v.getUint32(KEY.pid, true),
    status: v.getUint16(KEY.status, true),
    method: RED_METHODS[v.getUint8(KEY.method)] ?? "_OTHER",
    role,
    peer: zero ? "" : formatAddress(peerBytes, family),
    peerPort: v.getUint16(KEY.peerPort, true),
    ...(v.getUint8(KEY.scheme) === RED_SCHEME_HTTPS ? { scheme: "https" as const } : {}),
  };
}

/** Sums `cpus` per-CPU red_value copies starting at `off`, one every `cpuStride` bytes (8-aligned). */
export function sumRedValues(b: Uint8Array, off: number, cpus: number, cpuStride = RED_VALUE_BYTES): RedCounts {
  const v = new DataView(b.buffer, b.byteOffset + off, cpuStride * (cpus - 1) + RED_VALUE_BYTES);
  let count = 0;
  let sumNs = 0;
  const buckets = new Array<number>(RED_BUCKETS).fill(0);
  for (let c = 0; c < cpus; c++) {
    const base = c * cpuStride;
    count += Number(v.getBigInt64(base, true));
    sumNs += Number(v.getBigInt64(base + 8, true));
    for (let i = 0; i < RED_BUCKETS; i++) buckets[i]! += v.getInt32(base + 16 + i * 4, true);
  }
  return { count, sumNs, buckets };
}

/** The path in red_paths' value: bytes up to the first NUL; `truncated` when all RED_PATH_BYTES were path. */
export function decodeRedPath(b: Uint8Array): { path: string; truncated: boolean } {
  let n = b.indexOf(0);
  const truncated = n < 0;
  if (n < 0) n = Math.min(b.length, RED_PATH_BYTES);
  let path = "";
  for (let i = 0; i < n; i++) path += String.fromCharCode(b[i]!);
  return { path, truncated };
}

export class RedMaps {
  #gen = 0;
  /** The first generation of the metrics interval not exported yet: moves of older ones are dropped. */
  #openGen = 0;
  readonly #cpus: number;
  readonly #overflowSeen = new Map<number, RedCounts>();
  /** Per generation parity: the key index (key -> slot) and the per-CPU counts by slot. */
  readonly #index: [BpfMapApi, BpfMapApi];
  readonly #values: [BpfMapApi, BpfMapApi];
  readonly #next: BpfMapApi;
  /** A zero per-CPU red_value, written over each slot taken. */
  readonly #zero: Uint8Array;
  readonly #config: BpfMapApi;
  readonly #paths: BpfMapApi | undefined;
  readonly #overflow: BpfMapApi | undefined;
  readonly #moves: BpfMapApi | undefined;
  /** Moves taken so far, and those dropped (their generation's interval was exported). */
  readonly moveCounters = { applied: 0, dropped: 0 };
  /** red_body_a / red_body_b while body sizes are counted. */
  readonly #body: [BpfMapApi, BpfMapApi] | undefined;

  /** Throws when the object lacks the RED maps (or the body size maps, with `bodyBoundsBytes`). */
  constructor(object: BpfObjectApi, private readonly boundsSeconds: readonly number[], bodyBoundsBytes?: readonly number[]) {
    const ia = object.map("red_idx_a");
    const ib = object.map("red_idx_b");
    const va = object.map("red_vals_a");
    const vb = object.map("red_vals_b");
    const next = object.map("red_next");
    const config = object.map("red_config");
    if (!ia || !ib || !va || !vb || !next || !config) throw new Error("the network object has no RED maps");
    this.#index = [ia, ib];
    this.#values = [va, vb];
    this.#next = next;
    this.#config = config;
    this.#paths = object.map("red_paths");
    this.#overflow = object.map("red_overflow");
    this.#moves = object.map("red_moves");
    /* A per-CPU array's value as read from user space holds one copy per possible CPU. */
    const probe = this.#overflow?.lookupU32Key(0);
    if (!probe) throw new Error("the network object has no red_overflow map");
    this.#cpus = Math.max(1, Math.floor(probe.length / RED_VALUE_BYTES));
    this.#zero = new Uint8Array(RED_VALUE_BYTES * this.#cpus);
    if (bodyBoundsBytes) {
      const ba = object.map("red_body_a");
      const bb = object.map("red_body_b");
      const bc = object.map("red_body_config");
      if (!ba || !bb || !bc) throw new Error("the network object has no RED body size maps");
      this.#body = [ba, bb];
      const value = new Uint8Array(RED_BODY_CONFIG_BYTES);
      const v = new DataView(value.buffer);
      const n = Math.min(RED_MAX_BOUNDS, bodyBoundsBytes.length);
      v.setUint32(0, n, true);
      for (let i = 0; i < n; i++) v.setBigUint64(8 + i * 8, BigInt(Math.floor(bodyBoundsBytes[i]!)), true);
      bc.updateU32Key!(0, value);
    }
    /* red_config outlives a set too: the generations go on from its number. A connection remembers the generation of
     * the slot it last counted in (red_conn.slot_gen: a TLS connection's in tls_conns, kept across a new network set),
     * so a number given again could make it count into a slot that is another key's, or none that is taken. */
    const current = config.lookupU32Key(0);
    if (current && current.byteLength >= 4) this.#gen = new DataView(current.buffer, current.byteOffset, 4).getUint32(0, true);
    this.#openGen = this.#gen;
    this.#writeConfig();
    /* red_overflow is cumulative and outlives a set (shared across reloads): what it holds now was reported by the
     * RedMaps of the set before, so the first take reports only what is counted from here on. */
    this.#takeOverflow();
  }

  #writeConfig(): void {
    const value = new Uint8Array(RED_CONFIG_BYTES);
    const v = new DataView(value.buffer);
    v.setUint32(0, this.#gen, true);
    const n = Math.min(RED_MAX_BOUNDS, this.boundsSeconds.length);
    v.setUint32(4, n, true);
    for (let i = 0; i < n; i++) v.setBigUint64(8 + i * 8, BigInt(Math.round(this.boundsSeconds[i]! * 1e9)), true);
    v.setUint32(RED_CONFIG_OPEN_GEN, this.#openGen, true);
    this.#config.updateU32Key!(0, value);
  }

  /**
   * The metrics interval whose counts were just exported ends here: moves of exchanges counted in its generations
   * are dropped from now on (the kernel stops making them once it reads the new open generation).
   */
  closeInterval(): void {
    this.#openGen = this.#gen;
    this.#writeConfig();
  }

  /** The path bytes of a path hash, if the kernel's table still holds them. */
  path(hash: bigint): { path: string; truncated: boolean } | undefined {
    if (!this.#paths?.lookup) return undefined;
    const key = new Uint8Array(8);
    new DataView(key.buffer).setBigUint64(0, hash, true);
    const v = this.#paths.lookup(key);
    return v ? decodeRedPath(v) : undefined;
  }

  /**
   * Everything counted since the previous take: flips the generation, then empties the old one. Blocks ~1 ms. The
   * generation about to be counted into is emptied first: what a program preempted across the previous take still
   * counted there (late, counted now) must not keep a slot the new generation gives out again.
   */
  take(): { entries: RedEntry[]; overflow: Map<RoleValue, RedCounts>; bodies: RedBodyEntry[] } {
    const index = this.#gen & 1;
    const entries: RedEntry[] = [];
    this.#takeSlots(index ^ 1, entries);
    this.#gen = (this.#gen + 1) >>> 0;
    this.#writeConfig();
    Bun.sleepSync(FLIP_GRACE_MS);
    this.#takeSlots(index, entries);
    const bodies: RedBodyEntry[] = [];
    if (this.#body)
      this.#takeAll(this.#body[index]!, RED_BODY_VALUE_BYTES * this.#cpus, (keys, values, i, stride) => {
        /* Per CPU: the request's red_value, then the response's. */
        const request = sumRedValues(values, i * stride, this.#cpus, RED_BODY_VALUE_BYTES);
        const response = sumRedValues(values, i * stride + RED_VALUE_BYTES, this.#cpus, RED_BODY_VALUE_BYTES);
        if (request.count !== 0 || response.count !== 0) bodies.push({ key: decodeRedKey(keys, i * RED_KEY_BYTES), request, response });
      });
    this.#takeMoves(entries);
    return { entries, overflow: this.#takeOverflow(), bodies };
  }

  /** Takes red_moves whole: entries without a count for the generations of the open interval, the rest dropped. */
  #takeMoves(entries: RedEntry[]): void {
    if (!this.#moves) return;
    this.#takeAll(this.#moves, RED_VALUE_BYTES, (keys, values, i) => {
      const at = i * RED_MOVE_KEY_BYTES;
      const fromGen = new DataView(keys.buffer, keys.byteOffset + at + RED_KEY_BYTES, 4).getUint32(0, true);
      if (((fromGen - this.#openGen) | 0) < 0) {
        this.moveCounters.dropped++;
        return;
      }
      this.moveCounters.applied++;
      entries.push({ key: decodeRedKey(keys, at), ...sumRedValues(values, i * RED_VALUE_BYTES, 1), count: 0 });
    });
  }

  /** Takes the generation parity `index`: its keys' slots, their counts (then zeroed) and its slot counter (reset). */
  #takeSlots(index: number, entries: RedEntry[]): void {
    const raw = this.#next.lookupU32Key(index);
    /* Slots given out: the counter goes past RED_MAX_KEYS once the generation is full. */
    const next = raw ? new DataView(raw.buffer, raw.byteOffset, 8).getBigUint64(0, true) : 0n;
    const given = Number(next < BigInt(RED_MAX_KEYS) ? next : BigInt(RED_MAX_KEYS));
    if (given === 0) return;
    const keyOf = new Map<number, Uint8Array>();
    this.#takeAll(this.#index[index]!, 4, (keys, values, i) => {
      keyOf.set(new DataView(values.buffer, values.byteOffset + i * 4, 4).getUint32(0, true), keys.slice(i * RED_KEY_BYTES, (i + 1) * RED_KEY_BYTES));
    });
    const values = this.#values[index]!;
    const add = (v: Uint8Array, off: number, slot: number) => {
      const counts = sumRedValues(v, off, this.#cpus);
      const key = keyOf.get(slot);
      if (key && counts.count !== 0) entries.push({ key: decodeRedKey(key), ...counts });
    };
    /* The slots given out in one batch call each way (a generation of 4,096 keys slot by slot: ~9 ms here). */
    const stride = this.#zero.length;
    const all = values.readArrayBatch?.(given);
    if (all && values.writeArrayBatch?.(given, new Uint8Array(stride * given))) {
      for (let slot = 0; slot < given; slot++) add(all, slot * stride, slot);
    } else {
      for (let slot = 0; slot < given; slot++) {
        const v = values.lookupU32Key(slot);
        if (!v || v.every((x) => x === 0)) continue;
        add(v, 0, slot);
        values.updateU32Key!(slot, this.#zero);
      }
    }
    this.#next.updateU32Key!(index, new Uint8Array(8));
  }

  /** Takes `map` whole (`stride`: the bytes of one key's value as read, every CPU's copy of a per-CPU map's), calling `each` per key. */
  #takeAll(map: BpfMapApi, stride: number, each: (keys: Uint8Array, values: Uint8Array, i: number, stride: number) => void): void {
    for (;;) {
      const batch = map.takeBatch?.(TAKE_BATCH_KEYS);
      if (!batch) break;
      for (let i = 0; i < batch.count; i++) each(batch.keys, batch.values, i, stride);
      if (batch.count < TAKE_BATCH_KEYS) break;
    }
  }

  #takeOverflow(): Map<RoleValue, RedCounts> {
    const out = new Map<RoleValue, RedCounts>();
    if (!this.#overflow) return out;
    for (const role of [Role.SERVER, Role.CLIENT] as const) {
      const raw = this.#overflow.lookupU32Key(role);
      if (!raw) continue;
      const now = sumRedValues(raw, 0, this.#cpus);
      const seen = this.#overflowSeen.get(role);
      this.#overflowSeen.set(role, now);
      const delta: RedCounts = {
        count: now.count - (seen?.count ?? 0),
        sumNs: now.sumNs - (seen?.sumNs ?? 0),
        buckets: now.buckets.map((x, i) => x - (seen?.buckets[i] ?? 0)),
      };
      if (delta.count > 0) out.set(role, delta);
    }
    return out;
  }
}
