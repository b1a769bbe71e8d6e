import { describe, expect, test } from "bun:test";
import { LocalLinks } from "../../../../../src/collectors/network/http/local-links";
import type { HttpExchange } from "../../../../../src/collectors/network/http/parser";
import type { EndpointMeta } from "../../../../../src/collectors/network/http/spans";
import type { SpanItem } from "../../../../../src/export/model";

const CLIENT: EndpointMeta = { pid: 1, comm: "curl", localAddress: "127.0.0.1", localPort: 50000, remoteAddress: "127.0.0.1", remotePort: 8080 };
const SERVER: EndpointMeta = { pid: 2, comm: "srv", localAddress: "127.0.0.1", localPort: 8080, remoteAddress: "127.0.0.1", remotePort: 50000 };

function exchange(role: "server" | "client", meta: EndpointMeta, startNs: bigint, endNs: bigint, id?: number): HttpExchange<EndpointMeta> {
  return {
    role,
    request: { kind: "request", method: "GET", target: "/", path: "/", version: "1.1", host: undefined, complete: true },
    response: { kind: "response", status: 200, version: "1.1", complete: true },
    startNs,
    endNs,
    meta,
    ...(id === undefined ? {} : { id }),
  };
}

let n = 0;
const span = (flags?: number): SpanItem => ({ traceId: new Uint8Array(16).fill(++n), spanId: new Uint8Array(8).fill(n), name: "GET", kind: 2, startTimeUnixNano: 0n, endTimeUnixNano: 1n, ...(flags === undefined ? {} : { flags }) });

/** Every process in one network namespace, unless the test says otherwise. */
let netns: Record<number, string> = {};

function links(waitMs = 1000, maxHeld = 4) {
  const released: SpanItem[] = [];
  const l = new LocalLinks((_x, s) => released.push(s), (a) => a.startsWith("127.") || a.startsWith("10."), (pid) => netns[pid] ?? "net:[1]", waitMs, maxHeld);
  return { l, released };
}

describe("server spans linked to their client's on this host", () => {
  test("a server span waits while its client's request is awaited, then becomes that span's child in its trace", () => {
    const { l, released } = links();
    l.clientRequest(CLIENT, undefined, 0);
    const s = span();
    expect(l.holdServer(exchange("server", SERVER, 20n, 30n), s, 0)).toBe(true);
    expect(released).toEqual([]);
    const c = span(0x101);
    l.linkClient(exchange("client", CLIENT, 10n, 40n), c, 0);
    expect(released).toEqual([s]);
    expect([s.traceId, s.parentSpanId, s.flags]).toEqual([c.traceId, c.spanId, 0x301]);
    expect(l.counters.linked).toBe(1);
    expect(l.size).toBe(0);
  });

  test("not held: no client request on its connection lately, or a peer that cannot be on this host", () => {
    const { l } = links();
    expect(l.holdServer(exchange("server", SERVER, 20n, 30n), span(), 0)).toBe(false);
    // A request of its client, but more than the wait ago.
    l.clientRequest(CLIENT, undefined, 0);
    expect(l.holdServer(exchange("server", SERVER, 20n, 30n), span(), 1001)).toBe(false);
    // A request on another connection.
    const other = links().l;
    other.clientRequest({ ...CLIENT, localPort: 50001 }, undefined, 0);
    expect(other.holdServer(exchange("server", SERVER, 20n, 30n), span(), 0)).toBe(false);
    // A peer that cannot be on this host.
    const publicPeer = { ...SERVER, remoteAddress: "203.0.113.9" };
    other.clientRequest({ ...CLIENT, localAddress: "203.0.113.9" }, undefined, 0);
    expect(other.holdServer(exchange("server", publicPeer, 20n, 30n), span(), 0)).toBe(false);
    expect(other.size).toBe(0);
  });

  test("loopback connections of other network namespaces never match (each has its own 127.0.0.1); other addresses may", () => {
    netns = { 1: "net:[1]", 2: "net:[2]" };
    try {
      const { l } = links();
      l.clientRequest(CLIENT, undefined, 0);
      expect(l.holdServer(exchange("server", SERVER, 20n, 30n), span(), 0)).toBe(false);
      const pod = (m: EndpointMeta, local: string, remote: string) => ({ ...m, localAddress: local, remoteAddress: remote });
      l.clientRequest(pod(CLIENT, "10.1.0.5", "10.1.0.9"), undefined, 0);
      expect(l.holdServer(exchange("server", pod(SERVER, "10.1.0.9", "10.1.0.5"), 20n, 30n), span(), 0)).toBe(true);
      // A process whose namespace cannot be read (gone): no key, nothing held.
      netns = { 1: "net:[1]" };
      const gone = new LocalLinks(() => {}, () => true, (pid) => (pid === 1 ? "net:[1]" : undefined));
      gone.clientRequest(CLIENT, undefined, 0);
      expect(gone.holdServer(exchange("server", SERVER, 20n, 30n), span(), 0)).toBe(false);
    } finally {
      netns = {};
    }
  });

  test("times must nest, give or take a millisecond (a loopback reader may return before its writer)", () => {
    const { l, released } = links();
    l.clientRequest(CLIENT, undefined, 0);
    const s = span();
    l.holdServer(exchange("server", SERVER, 1_000_000n, 2_000_500n), s, 0);
    // The client's read returned 500 ns before the server's write did: still its exchange.
    l.linkClient(exchange("client", CLIENT, 1_000_100n, 2_000_000n), span(), 0);
    expect(released).toEqual([s]);
  });

  test("a client span made before its server's exchange ended (its read returned first) is the server's parent at once", () => {
    const { l, released } = links();
    l.clientRequest(CLIENT, undefined, 0);
    const c = span();
    l.linkClient(exchange("client", CLIENT, 1_000_000n, 2_000_000n), c, 0);
    const s = span();
    // Not held: linked to the span remembered, and left to the caller to release.
    expect(l.holdServer(exchange("server", SERVER, 1_000_200n, 2_000_300n), s, 10)).toBe(false);
    expect([s.traceId, s.parentSpanId, s.flags]).toEqual([c.traceId, c.spanId, 0x300]);
    expect(released).toEqual([]);
    // Remembered as long as the wait, once.
    const again = span();
    expect(l.holdServer(exchange("server", SERVER, 1_000_200n, 2_000_300n), again, 20)).toBe(true);
    expect(again.parentSpanId).toBeUndefined();
    const late = links();
    late.l.clientRequest(CLIENT, undefined, 0);
    late.l.linkClient(exchange("client", CLIENT, 1_000_000n, 2_000_000n), span(), 0);
    late.l.releaseDue(1001);
    late.l.clientRequest(CLIENT, undefined, 1001);
    expect(late.l.holdServer(exchange("server", SERVER, 1_000_200n, 2_000_300n), span(), 1001)).toBe(true);
  });

  test("times must nest: a client exchange that does not contain the server's leaves it held", () => {
    const { l, released } = links();
    l.clientRequest(CLIENT, undefined, 0);
    l.clientRequest(CLIENT, undefined, 0);
    const s = span();
    l.holdServer(exchange("server", SERVER, 20_000_000n, 30_000_000n), s, 0);
    l.linkClient(exchange("client", CLIENT, 1_000_000n, 5_000_000n), span(), 0);
    expect(released).toEqual([]);
    l.linkClient(exchange("client", CLIENT, 15_000_000n, 35_000_000n), span(), 0);
    expect(released).toEqual([s]);
  });

  test("HTTP/2: matched by stream, whatever order the streams end in", () => {
    const { l, released } = links();
    l.clientRequest(CLIENT, 1, 0);
    l.clientRequest(CLIENT, 3, 0);
    const s1 = span();
    const s3 = span();
    l.holdServer(exchange("server", SERVER, 20n, 30n, 1), s1, 0);
    l.holdServer(exchange("server", SERVER, 21n, 31n, 3), s3, 0);
    const c3 = span();
    l.linkClient(exchange("client", CLIENT, 10n, 40n, 3), c3, 0);
    expect(released).toEqual([s3]);
    expect(s3.parentSpanId).toBe(c3.spanId);
    const c1 = span();
    l.linkClient(exchange("client", CLIENT, 10n, 40n, 1), c1, 0);
    expect(s1.parentSpanId).toBe(c1.spanId);
  });

  test("released unlinked: past the bound, at the wait's end, and all at a flush", () => {
    const { l, released } = links(1000, 2);
    for (let i = 0; i < 3; i++) l.clientRequest({ ...CLIENT, localPort: 50000 + i }, undefined, 0);
    l.clientRequest({ ...CLIENT, localPort: 50003 }, undefined, 1400);
    const spans: SpanItem[] = [0, 1, 2, 3].map(() => span());
    l.holdServer(exchange("server", { ...SERVER, remotePort: 50000 }, 20n, 30n), spans[0]!, 0);
    l.holdServer(exchange("server", { ...SERVER, remotePort: 50001 }, 20n, 30n), spans[1]!, 500);
    // The bound: a third held span lets the oldest go.
    l.holdServer(exchange("server", { ...SERVER, remotePort: 50002 }, 20n, 30n), spans[2]!, 600);
    expect(released).toEqual([spans[0]!]);
    // The wait's end: held 1,000 ms.
    l.releaseDue(1499);
    expect(released).toEqual([spans[0]!]);
    l.releaseDue(1500);
    expect(released).toEqual([spans[0]!, spans[1]!]);
    l.holdServer(exchange("server", { ...SERVER, remotePort: 50003 }, 20n, 30n), spans[3]!, 1500);
    l.releaseDue(1600);
    expect(released).toEqual([spans[0]!, spans[1]!, spans[2]!]);
    // A flush: all of them.
    l.releaseDue(1601, true);
    expect(released).toEqual(spans);
    expect(l.size).toBe(0);
    for (const s of spans) expect(s.parentSpanId).toBeUndefined();
  });
});
