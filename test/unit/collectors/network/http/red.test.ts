import { describe, expect, test } from "bun:test";
import { RedAggregator, addressClass, DEFAULT_DURATION_BOUNDS_SECONDS } from "../../../../../src/collectors/network/http/red";
import { OVERFLOW_ROUTE, RouteTemplater } from "../../../../../src/collectors/network/http/routes";
import { STATUS_RESET, STATUS_UNKNOWN } from "../../../../../src/collectors/network/http/parser";
import { RED_BUCKETS, RED_KEY_BYTES, RED_PATH_OVERFLOW, RED_VALUE_BYTES, RedMaps, Role, decodeRedKey, decodeRedPath, sumRedValues, type RedEntry } from "../../../../../src/collectors/network/red-maps";
import type { HistogramPointItem, SumPointItem } from "../../../../../src/export/model";
import type { BpfMapApi, BpfObjectApi } from "../../../../../ffi/types";

/** struct red_key bytes (see ffi/bpf/network.bpf.c). */
function keyBytes(k: { pathHash?: bigint; pid: number; status: number; method: number; role: number; peer?: number[]; peerPort: number; family?: number; scheme?: number }): Uint8Array {
  const b = new Uint8Array(RED_KEY_BYTES);
  const v = new DataView(b.buffer);
  v.setBigUint64(0, k.pathHash ?? 0n, true);
  v.setUint32(8, k.pid, true);
  v.setUint16(12, k.status, true);
  v.setUint8(14, k.method);
  v.setUint8(15, k.role);
  b.set(k.peer ?? [], 16);
  v.setUint16(32, k.peerPort, true);
  v.setUint16(34, k.family ?? 2, true);
  v.setUint8(36, k.scheme ?? 0);
  return b;
}

/** Per-CPU struct red_value copies. */
function valueBytes(perCpu: Array<{ count: number; sumNs: number; buckets: Record<number, number> }>): Uint8Array {
  const b = new Uint8Array(RED_VALUE_BYTES * perCpu.length);
  const v = new DataView(b.buffer);
  perCpu.forEach((c, i) => {
    v.setBigInt64(i * RED_VALUE_BYTES, BigInt(c.count), true);
    v.setBigInt64(i * RED_VALUE_BYTES + 8, BigInt(c.sumNs), true);
    for (const [idx, n] of Object.entries(c.buckets)) v.setInt32(i * RED_VALUE_BYTES + 16 + Number(idx) * 4, n, true);
  });
  return b;
}

describe("RED map decoders (byte fixtures)", () => {
  test("key, per-CPU values (signed: a moved duration takes one from a bucket on another CPU) and paths", () => {
    const k = decodeRedKey(keyBytes({ pathHash: 0xabcdn, pid: 42, status: 404, method: 1, role: Role.CLIENT, peer: [10, 0, 0, 7], peerPort: 8080 }));
    expect(k).toEqual({ pathHash: 0xabcdn, pid: 42, status: 404, method: "GET", role: Role.CLIENT, peer: "10.0.0.7", peerPort: 8080 });
    expect(decodeRedKey(keyBytes({ pid: 1, status: 200, method: 0, role: Role.SERVER, peerPort: 80 })).peer).toBe("");
    // Counted by the TLS capture (RED_SCHEME_HTTPS).
    expect(decodeRedKey(keyBytes({ pid: 1, status: 200, method: 1, role: Role.SERVER, peerPort: 443, scheme: 1 })).scheme).toBe("https");
    const sum = sumRedValues(valueBytes([{ count: 2, sumNs: 3_000_000, buckets: { 0: 2 } }, { count: 0, sumNs: 5_000_000, buckets: { 0: -1, 3: 1 } }]), 0, 2);
    expect(sum.count).toBe(2);
    expect(sum.sumNs).toBe(8_000_000);
    expect(sum.buckets.slice(0, 4)).toEqual([1, 0, 0, 1]);
    expect(sum.buckets.length).toBe(RED_BUCKETS);
    const path = new Uint8Array(64);
    path.set(new TextEncoder().encode("/users/1"));
    expect(decodeRedPath(path)).toEqual({ path: "/users/1", truncated: false });
    expect(decodeRedPath(new Uint8Array(64).fill(97)).truncated).toBe(true);
  });
});

/** A map as RedMaps uses it: hash entries (taken in batches), array slots by u32 key, and what was written. */
class FakeMap {
  entries: Array<[Uint8Array, Uint8Array]> = [];
  slots = new Map<number, Uint8Array>();
  written: Uint8Array[] = [];
  constructor(readonly name: string, readonly typeName: string, private readonly one?: Uint8Array) {}
  updateU32Key(k: number, v: Uint8Array) {
    this.written.push(v.slice());
    this.slots.set(k, v.slice());
  }
  lookupU32Key(k: number) {
    return this.one ?? this.slots.get(k);
  }
  lookup(k: Uint8Array) {
    return this.entries.find(([key]) => key.every((x, i) => x === k[i]))?.[1];
  }
  takeBatch(limit: number) {
    const taken = this.entries.splice(0, limit);
    const keys = new Uint8Array(taken.reduce((n, [k]) => n + k.length, 0));
    const values = new Uint8Array(taken.reduce((n, [, v]) => n + v.length, 0));
    let ko = 0;
    let vo = 0;
    for (const [k, v] of taken) {
      keys.set(k, ko);
      values.set(v, vo);
      ko += k.length;
      vo += v.length;
    }
    return { count: taken.length, keys, values };
  }
}

/** A per-CPU array map with batch calls: keys 0 to count - 1, each value RED_VALUE_BYTES per CPU (2 CPUs here). */
class BatchFakeMap extends FakeMap {
  batchCalls = 0;
  readArrayBatch(count: number) {
    this.batchCalls++;
    const stride = 2 * RED_VALUE_BYTES;
    const out = new Uint8Array(stride * count);
    for (let i = 0; i < count; i++) {
      const v = this.slots.get(i);
      if (v) out.set(v, i * stride);
    }
    return out;
  }
  writeArrayBatch(count: number, values: Uint8Array) {
    this.batchCalls++;
    const stride = 2 * RED_VALUE_BYTES;
    for (let i = 0; i < count; i++) this.slots.set(i, values.slice(i * stride, (i + 1) * stride));
    return true;
  }
}

const u32 = (n: number) => new Uint8Array(new Uint32Array([n]).buffer);
const u64 = (n: number) => new Uint8Array(new BigUint64Array([BigInt(n)]).buffer);

/** One generation parity's maps as red.h has them: key index, per-CPU counts by slot, and the slot counter. */
function generation(parity: "a" | "b", next: FakeMap, index: number, batch: boolean) {
  const idx = new FakeMap(`red_idx_${parity}`, "hash");
  const vals = batch ? new BatchFakeMap(`red_vals_${parity}`, "percpu_array") : new FakeMap(`red_vals_${parity}`, "percpu_array");
  return {
    idx,
    vals,
    /** Counts `value` under `key` in a new slot, as a program would. */
    count(key: Uint8Array, value: Uint8Array) {
      const slot = Number(new DataView((next.slots.get(index) ?? u64(0)).buffer).getBigUint64(0, true));
      next.slots.set(index, u64(slot + 1));
      idx.entries.push([key, u32(slot)]);
      vals.slots.set(slot, value);
    },
    /** Whether the generation was emptied: no key, every slot given out zero, the counter reset. */
    empty() {
      const given = Number(new DataView((next.slots.get(index) ?? u64(0)).buffer).getBigUint64(0, true));
      return idx.entries.length === 0 && given === 0 && [...vals.slots.values()].every((v) => v.every((x) => x === 0));
    },
  };
}

function redObject(extra: FakeMap[] = [], batch = false) {
  const next = new FakeMap("red_next", "array");
  const a = generation("a", next, 0, batch);
  const b = generation("b", next, 1, batch);
  const config = new FakeMap("red_config", "array");
  const overflow = new FakeMap("red_overflow", "percpu_array", valueBytes([{ count: 0, sumNs: 0, buckets: {} }, { count: 0, sumNs: 0, buckets: {} }]));
  const maps = [a.idx, a.vals, b.idx, b.vals, next, config, overflow, ...extra] as unknown as BpfMapApi[];
  const object = { map: (n: string) => maps.find((m) => m.name === n) } as unknown as BpfObjectApi;
  return { object, a, b, config };
}

describe("RedMaps", () => {
  test.each([
    ["slot by slot", false],
    ["in batch calls", true],
  ])("each take flips the generation and empties the old generation: its keys' slots summed over CPUs, then zeroed (%s)", (_how, batch) => {
    const { object, a, b, config } = redObject([], batch);
    const red = new RedMaps(object, [0.005, 0.01]);
    const cfg0 = new DataView(config.written[0]!.buffer);
    expect([cfg0.getUint32(0, true), cfg0.getUint32(4, true), cfg0.getBigUint64(8, true), cfg0.getBigUint64(16, true)]).toEqual([0, 2, 5_000_000n, 10_000_000n]);
    a.count(keyBytes({ pid: 1, status: 200, method: 1, role: 1, peerPort: 80 }), valueBytes([{ count: 3, sumNs: 10, buckets: { 0: 3 } }, { count: 1, sumNs: 1, buckets: { 1: 1 } }]));
    a.count(keyBytes({ pid: 3, status: 404, method: 1, role: 1, peerPort: 80 }), valueBytes([{ count: 0, sumNs: 0, buckets: {} }, { count: 2, sumNs: 4, buckets: { 1: 2 } }]));
    const first = red.take();
    expect(new DataView(config.written.at(-1)!.buffer).getUint32(0, true)).toBe(1);
    expect(first.entries.map((e) => [e.key.pid, e.key.status, e.count, e.sumNs, e.buckets[0], e.buckets[1]])).toEqual([
      [1, 200, 4, 11, 3, 1],
      [3, 404, 2, 4, 0, 2],
    ]);
    expect(a.empty()).toBe(true);
    // Counted into the new generation meanwhile: taken by the next take, which empties it in turn.
    b.count(keyBytes({ pid: 2, status: 200, method: 1, role: 1, peerPort: 80 }), valueBytes([{ count: 5, sumNs: 0, buckets: { 0: 5 } }, { count: 0, sumNs: 0, buckets: {} }]));
    const second = red.take();
    expect(second.entries.map((e) => [e.key.pid, e.count])).toEqual([[2, 5]]);
    expect(b.empty()).toBe(true);
    if (batch) expect([a.vals, b.vals].map((m) => (m as BatchFakeMap).batchCalls)).toEqual([2, 2]);
  });

  test("what a late program counted into the generation about to be counted into is taken before it is reused", () => {
    const { object, a, b } = redObject();
    const red = new RedMaps(object, [0.005]);
    a.count(keyBytes({ pid: 1, status: 200, method: 1, role: 1, peerPort: 80 }), valueBytes([{ count: 1, sumNs: 1, buckets: { 0: 1 } }, { count: 0, sumNs: 0, buckets: {} }]));
    red.take();
    // gen 1 (b) is current; a program still on gen 0 counts into a after it was emptied.
    a.count(keyBytes({ pid: 7, status: 500, method: 2, role: 1, peerPort: 80 }), valueBytes([{ count: 2, sumNs: 2, buckets: { 0: 2 } }, { count: 0, sumNs: 0, buckets: {} }]));
    b.count(keyBytes({ pid: 2, status: 200, method: 1, role: 1, peerPort: 80 }), valueBytes([{ count: 1, sumNs: 1, buckets: { 0: 1 } }, { count: 0, sumNs: 0, buckets: {} }]));
    const second = red.take();
    expect(second.entries.map((e) => [e.key.pid, e.key.method, e.count]).sort()).toEqual([
      [2, "GET", 1],
      [7, "POST", 2],
    ]);
    // a is current again, from slot 0, with nothing left of before.
    expect(a.empty()).toBe(true);
    expect(b.empty()).toBe(true);
  });
});

describe("RedMaps moves (responses still moving after their generation was taken)", () => {
  /** struct red_move_key: the exchange's key and the generation it was counted in. */
  const moveKey = (key: Uint8Array, fromGen: number) => {
    const b = new Uint8Array(RED_KEY_BYTES + 8);
    b.set(key);
    new DataView(b.buffer).setUint32(RED_KEY_BYTES, fromGen, true);
    return b;
  };
  const KEY = keyBytes({ pid: 1, status: 200, method: 1, role: 1, peerPort: 80 });
  const openGen = (config: FakeMap) => new DataView(config.written.at(-1)!.buffer).getUint32(8 + 8 * 16 + 8, true);

  test("moves of the open interval's generations come as entries without a count; older ones are dropped", () => {
    const moves = new FakeMap("red_moves", "hash");
    const { object, a, config } = redObject([moves]);
    const red = new RedMaps(object, [0.005, 0.5, 1]);
    expect(openGen(config)).toBe(0);
    a.count(KEY, valueBytes([{ count: 1, sumNs: 2_000_000, buckets: { 0: 1 } }, { count: 0, sumNs: 0, buckets: {} }]));
    const first = red.take();
    expect(first.entries.map((e) => [e.count, e.sumNs, e.buckets.slice(0, 4)])).toEqual([[1, 2_000_000, [1, 0, 0, 0]]]);
    // Generation 0's exchange went on for 0.7 s more: it left bucket 0 for bucket 2 (0.5 to 1 s).
    moves.entries.push([moveKey(KEY, 0), valueBytes([{ count: 0, sumNs: 700_000_000, buckets: { 0: -1, 2: 1 } }])]);
    const second = red.take();
    expect(second.entries.map((e) => [e.key.pid, e.count, e.sumNs, e.buckets.slice(0, 4)])).toEqual([[1, 0, 700_000_000, [-1, 0, 1, 0]]]);
    expect(moves.entries).toEqual([]);
    // The interval is exported: generation 2 is the first of the next one, the kernel is told.
    red.closeInterval();
    expect(openGen(config)).toBe(2);
    moves.entries.push([moveKey(KEY, 1), valueBytes([{ count: 0, sumNs: 100_000_000, buckets: { 2: -1, 3: 1 } }])]);
    moves.entries.push([moveKey(KEY, 2), valueBytes([{ count: 0, sumNs: 5, buckets: {} }])]);
    expect(red.take().entries.map((e) => [e.count, e.sumNs])).toEqual([[0, 5]]);
    expect(red.moveCounters).toEqual({ applied: 2, dropped: 1 });
  });

  test("an aggregated series (and its service graph edge) takes a move: its count stays, its sum grows, its exchange changes bucket", () => {
    const who = { name: "x", attributes: {}, resource: { "service.name": "api" } };
    const red = new RedAggregator({
      routes: new RouteTemplater({ templates: [], maxRoutes: 10 }),
      boundsSeconds: [0.005, 0.5, 1],
      describe: () => who,
      path: () => ({ path: "/download", truncated: false }),
    });
    const key = { pathHash: 11n, pid: 10, status: 200, method: "GET", role: Role.SERVER, peer: "", peerPort: 8080 } as const;
    red.add([{ key, count: 1, sumNs: 2_000_000, buckets: [1, 0, 0, 0] }]);
    red.add([{ key, count: 0, sumNs: 700_000_000, buckets: [-1, 0, 1, 0] }]);
    const points = red.collect(0n, 1n) as HistogramPointItem[];
    // The series and the service graph's server-side histogram alike.
    for (const name of ["http.server.request.duration", "traces_service_graph_request_server_seconds"]) {
      const point = points.find((p) => p.name === name)!;
      expect([name, point.count, point.sum, point.bucketCounts]).toEqual([name, 1, 0.702, [0, 0, 1, 0]]);
    }
  });
});

describe("RedMaps across a new set", () => {
  test("red_config outlives a set: the RedMaps of the next set goes on from its generation, not from 0", () => {
    const { object, config } = redObject();
    const first = new RedMaps(object, [0.005]);
    for (let i = 0; i < 3; i++) first.take();
    const gen = () => new DataView(config.written.at(-1)!.buffer).getUint32(0, true);
    expect(gen()).toBe(3);
    const second = new RedMaps(object, [0.005, 0.01]);
    // The bounds are the new set's; the generation the one counted into now.
    expect(gen()).toBe(3);
    expect(new DataView(config.written.at(-1)!.buffer).getUint32(4, true)).toBe(2);
    second.take();
    expect(gen()).toBe(4);
  });

  test("red_overflow outlives a set: the RedMaps of the next set reports only what is counted after it was made", () => {
    const overflow = new FakeMap("red_overflow", "percpu_array");
    const { object } = redObject();
    const shared = { map: (n: string) => (n === "red_overflow" ? overflow : object.map(n)) } as unknown as BpfObjectApi;
    const cpu = (count: number) => ({ count, sumNs: count, buckets: { 0: count } });
    /** What the overflow keys counted so far, per role, as the kernel keeps it (two CPUs). */
    const counted = (server: number, client: number) => {
      overflow.slots.set(0, valueBytes([cpu(0), cpu(0)]));
      overflow.slots.set(Role.SERVER, valueBytes([cpu(server), cpu(0)]));
      overflow.slots.set(Role.CLIENT, valueBytes([cpu(0), cpu(client)]));
    };
    const taken = (red: RedMaps) => [...red.take().overflow].map(([role, c]) => [role, c.count]);
    counted(3, 2);
    const first = new RedMaps(shared, [0.005]);
    counted(5, 2);
    expect(taken(first)).toEqual([[Role.SERVER, 2]]);
    // The set is replaced; the map keeps its counts (5 and 2), every one reported already.
    const second = new RedMaps(shared, [0.005]);
    expect(taken(second)).toEqual([]);
    counted(6, 4);
    expect(taken(second)).toEqual([
      [Role.SERVER, 1],
      [Role.CLIENT, 2],
    ]);
  });
});

describe("RedMaps body sizes", () => {
  test("writes the body bounds, and takes the request's and response's per-CPU histograms of the same generation", () => {
    const bodyA = new FakeMap("red_body_a", "percpu_hash");
    const bodyB = new FakeMap("red_body_b", "percpu_hash");
    const bodyConfig = new FakeMap("red_body_config", "array");
    const { object } = redObject([bodyA, bodyB, bodyConfig]);
    const red = new RedMaps(object, [0.005], [0, 100, 1000]);
    const cfg = new DataView(bodyConfig.written[0]!.buffer);
    expect([cfg.getUint32(0, true), cfg.getBigUint64(8, true), cfg.getBigUint64(16, true), cfg.getBigUint64(24, true)]).toEqual([3, 0n, 100n, 1000n]);
    // Per CPU: the request's red_value, then the response's (struct red_body_value).
    const body = (perCpu: Array<[number, number, number, number]>) => {
      const out = new Uint8Array(2 * RED_VALUE_BYTES * perCpu.length);
      perCpu.forEach(([reqCount, reqBytes, respCount, respBytes], i) => {
        out.set(valueBytes([{ count: reqCount, sumNs: reqBytes, buckets: { 2: reqCount } }]), i * 2 * RED_VALUE_BYTES);
        out.set(valueBytes([{ count: respCount, sumNs: respBytes, buckets: { 3: respCount } }]), i * 2 * RED_VALUE_BYTES + RED_VALUE_BYTES);
      });
      return out;
    };
    bodyA.entries.push([keyBytes({ pid: 1, status: 200, method: 2, role: 1, peerPort: 80 }), body([[1, 300, 1, 5000], [2, 600, 2, 4000]])]);
    bodyB.entries.push([keyBytes({ pid: 2, status: 200, method: 1, role: 1, peerPort: 80 }), body([[1, 0, 1, 0], [0, 0, 0, 0]])]);
    const first = red.take();
    expect(first.bodies.map((e) => [e.key.pid, e.key.method, e.request.count, e.request.sumNs, e.request.buckets[2], e.response.count, e.response.sumNs, e.response.buckets[3]])).toEqual([[1, "POST", 3, 900, 3, 3, 9000, 3]]);
    expect(bodyB.entries.length).toBe(1);
    expect(red.take().bodies.map((e) => e.key.pid)).toEqual([2]);
  });
});

function entry(key: Partial<RedEntry["key"]> & { role: 1 | 2 }, count: number, bucket = 0): RedEntry {
  const buckets = new Array<number>(RED_BUCKETS).fill(0);
  buckets[bucket] = count;
  return { key: { pathHash: 0n, pid: 10, status: 200, method: "GET", peer: "", peerPort: 8080, ...key }, count, sumNs: count * 1_000_000, buckets };
}

describe("RedAggregator", () => {
  const resources: Record<number, Record<string, string | number>> = { 10: { "service.name": "api" }, 20: { "service.name": "web" } };
  const paths = new Map<bigint, string>([[11n, "/users/7"], [12n, "/users/8"], [13n, "/health"]]);
  const make = (maxRoutes = 100) =>
    new RedAggregator({
      routes: new RouteTemplater({ templates: [], maxRoutes }),
      boundsSeconds: DEFAULT_DURATION_BOUNDS_SECONDS,
      describe: (pid) => ({ name: "x", attributes: {}, resource: resources[pid] }),
      path: (h) => (paths.has(h) ? { path: paths.get(h)!, truncated: false } : undefined),
      serviceAt: (address) => (address === "10.1.2.3" ? "db" : undefined),
    });

  test("server series per route template and status under the workload's resource; client series per server", () => {
    const red = make();
    red.add([
      entry({ role: Role.SERVER, pathHash: 11n, peer: "127.0.0.1" }, 3),
      entry({ role: Role.SERVER, pathHash: 12n, peer: "127.0.0.1" }, 2, 4),
      entry({ role: Role.SERVER, pathHash: 13n, status: 503, peer: "127.0.0.1" }, 1),
      entry({ role: Role.CLIENT, pid: 20, peer: "127.0.0.1", peerPort: 8080 }, 6),
      entry({ role: Role.CLIENT, pid: 10, peer: "10.1.2.3", peerPort: 5432, status: 500 }, 2),
    ]);
    const points = red.collect(1n, 2n);
    const h = points.filter((p): p is HistogramPointItem => p.type === "histogram" && p.name === "http.server.request.duration");
    expect(h.map((p) => [p.resource?.["service.name"], p.attributes?.["http.route"], p.attributes?.["http.response.status_code"], p.attributes?.["error.type"], p.count])).toEqual([
      ["api", "/users/{id}", 200, undefined, 5],
      ["api", "/health", 503, "503", 1],
    ]);
    expect(h[0]!.bucketCounts[0]).toBe(3);
    expect(h[0]!.bucketCounts[4]).toBe(2);
    expect(h[0]!.bucketCounts.length).toBe(DEFAULT_DURATION_BOUNDS_SECONDS.length + 1);
    expect(h[0]!.sum).toBeCloseTo(0.005);
    const c = points.filter((p): p is HistogramPointItem => p.type === "histogram" && p.name === "http.client.request.duration");
    expect(c.map((p) => [p.resource?.["service.name"], p.attributes?.["server.address"], p.attributes?.["server.port"], p.count])).toEqual([
      ["web", "127.0.0.1", 8080, 6],
      ["api", "10.1.2.3", 5432, 2],
    ]);
    // Service graph: web -> api (a local listener learnt from the server side), api -> db (discovery), counted once each.
    const total = points.filter((p): p is SumPointItem => p.name === "traces_service_graph_request_total");
    expect(total.map((p) => [p.attributes?.client, p.attributes?.server, p.value])).toEqual([["web", "api", 6], ["api", "db", 2]]);
    expect(points.filter((p) => p.name === "traces_service_graph_request_failed_total").map((p) => (p as SumPointItem).value)).toEqual([2]);
    expect(red.collect(2n, 3n)).toEqual([]);
  });

  test("exchanges seen in user space (HTTP/2) count exactly, summed per key before they join the series", () => {
    const red = make();
    const server = { pid: 10, role: Role.SERVER, method: "GET", status: 200, peer: "127.0.0.1", peerPort: 8080 } as const;
    const client = { pid: 20, role: Role.CLIENT, method: "GET", status: 200, peer: "127.0.0.1", peerPort: 8080 } as const;
    /* Runs of one key and keys taking turns: server exchanges on two routes (one 503), one client series. */
    for (const [key, path, ms] of [
      [server, "/users/7", 1], [server, "/users/7", 20], [server, "/users/8", 1], [client, undefined, 2], [server, "/health", 1],
      [{ ...server, status: 503 }, "/health", 300], [client, undefined, 30], [server, "/users/9", 1],
    ] as const) red.addExchange(key, path, ms * 1e6);
    expect(red.counted).toEqual({ server: 6, client: 2 });
    const points = red.collect(1n, 2n);
    const h = (name: string) => points.filter((p): p is HistogramPointItem => p.type === "histogram" && p.name === name);
    expect(h("http.server.request.duration").map((p) => [p.attributes?.["http.route"], p.attributes?.["http.response.status_code"], p.count, p.bucketCounts.slice(0, 8)])).toEqual([
      ["/users/{id}", 200, 4, [3, 0, 1, 0, 0, 0, 0, 0]],
      ["/health", 200, 1, [1, 0, 0, 0, 0, 0, 0, 0]],
      ["/health", 503, 1, [0, 0, 0, 0, 0, 0, 0, 1]],
    ]);
    expect(h("http.client.request.duration").map((p) => [p.resource?.["service.name"], p.count, p.sum])).toEqual([["web", 2, 0.032]]);
    expect(red.collect(2n, 3n)).toEqual([]);
  });

  test("an HTTP/2 request reset before an answer: its own series, no status code, error.type stream_reset, a failed edge", () => {
    const red = make();
    red.addExchange({ pid: 10, role: Role.SERVER, method: "GET", status: STATUS_RESET, peer: "10.0.0.5", peerPort: 8080 }, "/wait", 2_000_000);
    const points = red.collect(0n, 1n);
    const series = points.find((p) => p.name === "http.server.request.duration") as HistogramPointItem;
    expect([series.count, series.attributes]).toEqual([1, { "http.request.method": "GET", "error.type": "stream_reset", "http.route": "/wait", "server.port": 8080 }]);
    expect((points.find((p) => p.name === "traces_service_graph_request_failed_total") as SumPointItem).value).toBe(1);
  });

  test("an exchange whose status is unknown (HTTP/2 from a connection's middle): its own series, no status code, no error", () => {
    const red = make();
    const server = { pid: 10, role: Role.SERVER, method: "_OTHER", status: STATUS_UNKNOWN, peer: "127.0.0.1", peerPort: 8080 } as const;
    red.addExchange(server, "/put", 1e6);
    red.addExchange({ ...server, status: 200 }, "/put", 1e6);
    const h = red.collect(1n, 2n).filter((p): p is HistogramPointItem => p.type === "histogram" && p.name === "http.server.request.duration");
    expect(h.map((p) => [p.attributes?.["http.request.method"], p.attributes?.["http.response.status_code"], p.attributes?.["error.type"], p.count])).toEqual([
      ["_OTHER", undefined, undefined, 1],
      ["_OTHER", 200, undefined, 1],
    ]);
  });

  test("body sizes: request and response histograms per series, unit By, beside its duration; none without addBodies", () => {
    const bounds = [0, 100, 1000];
    const red = new RedAggregator({
      routes: new RouteTemplater({ templates: [], maxRoutes: 100 }),
      boundsSeconds: DEFAULT_DURATION_BOUNDS_SECONDS,
      bodyBoundsBytes: bounds,
      describe: (pid) => ({ name: "x", attributes: {}, resource: resources[pid] }),
      path: (h) => (paths.has(h) ? { path: paths.get(h)!, truncated: false } : undefined),
    });
    const counts = (count: number, bytes: number, bucket: number) => {
      const buckets = new Array<number>(RED_BUCKETS).fill(0);
      buckets[bucket] = count;
      return { count, sumNs: bytes, buckets };
    };
    red.add([entry({ role: Role.SERVER, pathHash: 11n, method: "POST" }, 2), entry({ role: Role.CLIENT, pid: 20, peer: "127.0.0.1" }, 2)]);
    red.addBodies([
      { key: entry({ role: Role.SERVER, pathHash: 11n, method: "POST" }, 0).key, request: counts(2, 600, 2), response: counts(2, 20, 1) },
      { key: entry({ role: Role.CLIENT, pid: 20, peer: "127.0.0.1" }, 0).key, request: counts(0, 0, 0), response: counts(2, 5000, 3) },
    ]);
    const points = red.collect(1n, 2n).filter((p): p is HistogramPointItem => p.type === "histogram" && p.name.endsWith(".body.size"));
    expect(points.map((p) => [p.name, p.unit, p.attributes?.["http.route"] ?? p.attributes?.["server.address"], p.count, p.sum, p.bucketCounts, p.explicitBounds])).toEqual([
      ["http.server.request.body.size", "By", "/users/{id}", 2, 600, [0, 0, 2, 0], bounds],
      ["http.server.response.body.size", "By", "/users/{id}", 2, 20, [0, 2, 0, 0], bounds],
      ["http.client.response.body.size", "By", "127.0.0.1", 2, 5000, [0, 0, 0, 2], bounds],
    ]);
    red.add([entry({ role: Role.SERVER, pathHash: 11n }, 1)]);
    expect(red.collect(2n, 3n).filter((p) => p.name.endsWith(".body.size"))).toEqual([]);
  });

  test("exchanges counted over TLS are series of their own with url.scheme https; cleartext ones carry no url.scheme", () => {
    const red = make();
    red.add([entry({ role: Role.SERVER, pathHash: 11n, peer: "127.0.0.1" }, 3), entry({ role: Role.SERVER, pathHash: 11n, peer: "127.0.0.1", scheme: "https" }, 2)]);
    const h = red.collect(1n, 2n).filter((p): p is HistogramPointItem => p.type === "histogram" && p.name === "http.server.request.duration");
    expect(h.map((p) => [p.attributes?.["url.scheme"], p.count])).toEqual([
      [undefined, 3],
      ["https", 2],
    ]);
  });

  test("routes beyond max_routes and paths the kernel had no room for count under the overflow route; unknown peers by class", () => {
    const red = make(1);
    red.add([
      entry({ role: Role.SERVER, pathHash: 13n }, 1),
      entry({ role: Role.SERVER, pathHash: 11n }, 2),
      entry({ role: Role.SERVER, pathHash: RED_PATH_OVERFLOW }, 7),
      entry({ role: Role.SERVER, pathHash: 13n, peer: "203.0.113.9" }, 1),
    ]);
    const points = red.collect(1n, 2n);
    const routes = points.filter((p) => p.name === "http.server.request.duration").map((p) => [p.attributes?.["http.route"], (p as HistogramPointItem).count]);
    expect(routes).toEqual([["/health", 2], [OVERFLOW_ROUTE, 9]]);
    expect(points.filter((p) => p.name === "traces_service_graph_request_total").map((p) => [p.attributes?.client, p.attributes?.server, (p as SumPointItem).value])).toEqual([["public", "api", 11]]);
    expect(addressClass("192.168.1.1")).toBe("private");
    // A request whose connection closed before any response: a transport error, no status code.
    red.add([entry({ role: Role.CLIENT, peer: "127.0.0.1", status: 0 }, 2)]);
    const closed = red.collect(2n, 3n).find((p) => p.name === "http.client.request.duration")!;
    expect(closed.attributes).toEqual({ "http.request.method": "GET", "error.type": "connection_closed", "server.address": "127.0.0.1", "server.port": 8080 });
    expect(addressClass("::1")).toBe("loopback");
    expect(addressClass("8.8.8.8")).toBe("public");
  });

  test("a sampled span's ids become the exemplar of its series", () => {
    const red = make();
    red.add([entry({ role: Role.SERVER, pathHash: 11n }, 3)]);
    const traceId = new Uint8Array(16).fill(1);
    const spanId = new Uint8Array(8).fill(2);
    red.exemplar({ pid: 10, role: Role.SERVER, method: "GET", status: 200, path: "/users/99", peerPort: 8080 }, { timeUnixNano: 5n, value: 0.001, traceId, spanId });
    const [p] = red.collect(1n, 2n) as HistogramPointItem[];
    expect(p!.exemplars).toEqual([{ timeUnixNano: 5n, value: 0.001, traceId, spanId }]);
  });

  describe("exemplars of spans like earlier ones (the aggregator's cache of series found)", () => {
    const ids = (n: number) => ({ timeUnixNano: BigInt(n), value: 0.001, traceId: new Uint8Array(16).fill(n), spanId: new Uint8Array(8).fill(n) });
    const server = (path: string, pid = 10) => ({ pid, role: Role.SERVER, method: "GET", status: 200, path, peerPort: 8080 });
    const points = (red: RedAggregator) => (red.collect(1n, 2n) as HistogramPointItem[]).filter((p) => p.name === "http.server.request.duration");

    test("the latest span of a series is its exemplar, each in its own interval", () => {
      const red = make();
      red.add([entry({ role: Role.SERVER, pathHash: 11n }, 1)]);
      red.exemplar(server("/users/7"), ids(1));
      red.exemplar(server("/users/7"), ids(2));
      expect(points(red)[0]!.exemplars).toEqual([ids(2)]);
      // A new interval: the same span fields now belong to the new interval's series.
      red.exemplar(server("/users/7"), ids(3));
      red.add([entry({ role: Role.SERVER, pathHash: 11n }, 1)]);
      const next = points(red);
      expect(next.map((p) => [p.count, p.exemplars])).toEqual([[1, [ids(3)]]]);
    });

    test("a route taken by counts after a span was seen moves the next like span to the series it now belongs to", () => {
      const red = make(1);
      // The service has room for one route: /health would be its own route.
      red.exemplar(server("/health"), ids(1));
      // The kernel's counts take that room for /users/{id} and count /health under the overflow key.
      red.add([entry({ role: Role.SERVER, pathHash: 11n }, 2), entry({ role: Role.SERVER, pathHash: RED_PATH_OVERFLOW }, 3)]);
      red.exemplar(server("/health"), ids(2));
      const byRoute = Object.fromEntries(points(red).map((p) => [p.attributes?.["http.route"], p.exemplars]));
      expect(byRoute).toEqual({ "/users/{id}": undefined, [OVERFLOW_ROUTE]: [ids(2)] });
    });

    test("a process whose workload changed puts the next like span under its new resource", () => {
      const web = { "service.name": "web" };
      const shop = { "service.name": "shop" };
      let resource: Record<string, string> = web;
      const red = new RedAggregator({
        routes: new RouteTemplater({ templates: [], maxRoutes: 100 }),
        boundsSeconds: DEFAULT_DURATION_BOUNDS_SECONDS,
        describe: () => ({ name: "x", attributes: {}, resource }),
        path: (h) => (paths.has(h) ? { path: paths.get(h)!, truncated: false } : undefined),
      });
      // Counts of the same pid under each resource (both routes learnt before any span).
      red.add([entry({ role: Role.SERVER, pathHash: 13n }, 1)]);
      resource = shop;
      red.add([entry({ role: Role.SERVER, pathHash: 13n }, 1)]);
      resource = web;
      red.exemplar(server("/health"), ids(1));
      resource = shop;
      red.exemplar(server("/health"), ids(2));
      const byService = Object.fromEntries(points(red).map((p) => [p.resource?.["service.name"], p.exemplars]));
      expect(byService).toEqual({ web: [ids(1)], shop: [ids(2)] });
    });

    test("a client's peer counted into the overflow series after a span was seen moves the next like span there", () => {
      const red = new RedAggregator({
        routes: new RouteTemplater({ templates: [], maxRoutes: 100 }),
        boundsSeconds: DEFAULT_DURATION_BOUNDS_SECONDS,
        describe: (pid) => ({ name: "x", attributes: {}, resource: resources[pid] }),
        path: () => undefined,
        maxPeersPerService: 1,
      });
      const client = (peer: string) => ({ pid: 20, role: Role.CLIENT, method: "GET", status: 200, peer, peerPort: 5432 });
      // Seen before any count: the service has room for this peer.
      red.exemplar(client("10.9.9.9"), ids(1));
      // Counts take the one peer's room for another; this one's count goes to the overflow series.
      red.add([entry({ role: Role.CLIENT, pid: 20, peer: "10.1.1.1", peerPort: 5432 }, 1), entry({ role: Role.CLIENT, pid: 20, peer: "10.9.9.9", peerPort: 5432 }, 2)]);
      red.exemplar(client("10.9.9.9"), ids(2));
      const clients = (red.collect(1n, 2n) as HistogramPointItem[]).filter((p) => p.name === "http.client.request.duration");
      const overflow = clients.find((p) => p.attributes?.["otel.metric.overflow"] === true)!;
      expect([overflow.count, overflow.exemplars]).toEqual([2, [ids(2)]]);
    });
  });

  test("sampled spans' paths take no routes: the service's counted paths keep theirs, exemplars still attach", () => {
    const red = make(1);
    const ids = (n: number) => ({ timeUnixNano: BigInt(n), value: 0.001, traceId: new Uint8Array(16).fill(n), spanId: new Uint8Array(8).fill(n) });
    // Spans of exchanges the kernel counted under its overflow key, seen before the interval's counts.
    for (let i = 0; i < 5; i++) red.exemplar({ pid: 10, role: Role.SERVER, method: "GET", status: 200, path: `/r/x${String.fromCharCode(97 + i)}`, peerPort: 8080 }, ids(i + 1));
    // The span of a counted exchange, also seen before its count.
    red.exemplar({ pid: 10, role: Role.SERVER, method: "GET", status: 200, path: "/health", peerPort: 8080 }, ids(9));
    red.add([entry({ role: Role.SERVER, pathHash: 13n }, 4), entry({ role: Role.SERVER, pathHash: RED_PATH_OVERFLOW }, 6)]);
    const points = (red.collect(1n, 2n) as HistogramPointItem[]).filter((p) => p.name === "http.server.request.duration");
    const byRoute = Object.fromEntries(points.map((p) => [p.attributes?.["http.route"], p.count]));
    expect(byRoute).toEqual({ "/health": 4, [OVERFLOW_ROUTE]: 6 });
    expect(points.find((p) => p.attributes?.["http.route"] === "/health")!.exemplars).toEqual([ids(9)]);
  });
});
