import { describe, expect, test } from "bun:test";
import { formatAddress } from "../../../../src/collectors/network/addresses";
import { CONN_EVENT_BYTES, ConnKind, decodeConnEvent, decodeHttpEvent, decodeHttpEventReused, Direction, HTTP_EVENT_HEADER_BYTES, HttpEventFlag, releaseData } from "../../../../src/collectors/network/decoders";
import { networkSetSpec } from "../../../../src/collectors/network/spec";
import { connRecord, httpRecord } from "./records";

const mapped = (a: number[]) => [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ...a];

describe("network record decoders", () => {
  test("conn_event: every field at its offset, IPv4", () => {
    const v = connRecord({ kind: ConnKind.CLOSED, ts: 900n, sk: 0xffff888812345678n, start: 100n, est: 150n, sent: 1234, recv: 5678, pid: 4242, retrans: 3, sport: 40000, dport: 8080, family: 2, dir: Direction.OUTBOUND, flags: 1, saddr: [127, 0, 0, 1], daddr: [10, 1, 2, 3], comm: "curl", reportedSent: 1000, reportedRecv: 5000 });
    expect(decodeConnEvent(v, 0, v.byteLength)).toEqual({
      type: "conn", kind: ConnKind.CLOSED, timestampNs: 900n, sk: 0xffff888812345678n, startNs: 100n, establishedNs: 150n, bytesSent: 1234, bytesRecv: 5678, reportedSent: 1000, reportedRecv: 5000,
      cgroupId: 77n, pid: 4242, retransmits: 3, localAddress: "127.0.0.1", localPort: 40000, remoteAddress: "10.1.2.3", remotePort: 8080, family: 2,
      direction: Direction.OUTBOUND, flags: 1, comm: "curl",
    });
  });

  test("conn_event: IPv6 and v4-mapped addresses; short records throw", () => {
    const v = connRecord({ kind: ConnKind.OPEN, ts: 1n, sk: 1n, start: 1n, est: 1n, sent: 0, recv: 0, pid: 1, retrans: 0, sport: 1, dport: 2, family: 10, dir: Direction.INBOUND, flags: 0, saddr: mapped([127, 0, 0, 1]), daddr: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2], comm: "x" });
    const e = decodeConnEvent(v, 0, v.byteLength);
    expect(e.localAddress).toBe("127.0.0.1");
    expect(e.remoteAddress).toBe("fd00::2");
    expect(() => decodeConnEvent(v, 0, CONN_EVENT_BYTES - 1)).toThrow(RangeError);
  });

  test("http_event: header fields and the captured bytes (copied)", () => {
    const v = httpRecord({ ts: 5n, sk: 9n, off: 160, pid: 31, len: 4096, io: 1, sport: 8080, dport: 51000, family: 2, saddr: [127, 0, 0, 1], daddr: [127, 0, 0, 2], comm: "server", data: "HTTP/1.1 200 OK\r\n" });
    const e = decodeHttpEvent(v, 0, v.byteLength);
    expect(e).toMatchObject({ type: "http", timestampNs: 5n, sk: 9n, streamOffset: 160, pid: 31, tid: 31, length: 4096, io: 1, localPort: 8080, remotePort: 51000, localAddress: "127.0.0.1", remoteAddress: "127.0.0.2", comm: "server", flags: 0 });
    /* A header-only record: the kernel stopped forwarding an HTTP/2 connection. */
    const stopped = httpRecord({ ts: 6n, sk: 9n, off: 4256, pid: 31, len: 900, io: 0, sport: 8080, dport: 51000, family: 2, saddr: [127, 0, 0, 1], daddr: [127, 0, 0, 2], comm: "server", data: "", flags: HttpEventFlag.H2_STOPPED });
    expect(decodeHttpEvent(stopped, 0, stopped.byteLength)).toMatchObject({ streamOffset: 4256, length: 900, flags: HttpEventFlag.H2_STOPPED, data: new Uint8Array(0) });
    expect(new TextDecoder().decode(e.data)).toBe("HTTP/1.1 200 OK\r\n");
    expect(() => decodeHttpEvent(v, 0, HTTP_EVENT_HEADER_BYTES + 3)).toThrow(RangeError);
    new Uint8Array(v.buffer).fill(0);
    expect(new TextDecoder().decode(e.data)).toBe("HTTP/1.1 200 OK\r\n");
  });

  test("http_event in place: the same fields, the data the record's own bytes until released", () => {
    const v = httpRecord({ ts: 5n, sk: 9n, off: 160, pid: 31, len: 4096, io: 1, sport: 8080, dport: 51000, family: 2, saddr: [127, 0, 0, 1], daddr: [127, 0, 0, 2], comm: "server", data: "HTTP/1.1 200 OK\r\n" });
    const e = decodeHttpEventReused(v, 0, v.byteLength);
    expect(e).toMatchObject({ type: "http", timestampNs: 5n, sk: 9n, streamOffset: 160, pid: 31, tid: 31, length: 4096, io: 1, localPort: 8080, remotePort: 51000, localAddress: "127.0.0.1", remoteAddress: "127.0.0.2", comm: "server", flags: 0 });
    expect(new TextDecoder().decode(e.data)).toBe("HTTP/1.1 200 OK\r\n");
    expect(e.data.buffer).toBe(v.buffer);
    expect(() => decodeHttpEventReused(v, 0, HTTP_EVENT_HEADER_BYTES + 3)).toThrow(RangeError);
    releaseData(e);
    expect(e.data.length).toBe(0);
    expect(e.localAddress).toBe("127.0.0.1");
  });

  test("http_event reused (the network set's decoder): one record refilled per call; endpoints kept beyond it, the same one while records agree", () => {
    const spec = networkSetSpec({ selfPid: 1, http: true, httpCapture: "socket", httpExchangesPerSecond: 250, maxConnections: 1024 });
    expect(spec.ringBuffers.find((r) => r.map === "http_events")?.decode).toBe(decodeHttpEventReused);
    const fields = { ts: 5n, sk: 9n, off: 160, pid: 31, len: 4096, io: 1, sport: 8080, dport: 51000, family: 2, saddr: [127, 0, 0, 1], daddr: [127, 0, 0, 2], comm: "server", data: "HTTP/1.1 200 OK\r\n" };
    const v = httpRecord(fields);
    const e = decodeHttpEventReused(v, 0, v.byteLength);
    expect(e).toMatchObject({ type: "http", timestampNs: 5n, sk: 9n, streamOffset: 160, pid: 31, localAddress: "127.0.0.1", remoteAddress: "127.0.0.2", comm: "server" });
    expect(e.data.buffer).toBe(v.buffer);
    const endpoint = e.endpointOr(undefined);
    expect(endpoint).toMatchObject({ pid: 31, comm: "server", localAddress: "127.0.0.1", localPort: 8080, remoteAddress: "127.0.0.2", remotePort: 51000 });
    /* Another record of the same socket: the same endpoint. Every field of the endpoint told apart: a new one, the kept one unchanged. */
    const again = httpRecord({ ...fields, ts: 9n, off: 200, io: 0 });
    expect(decodeHttpEventReused(again, 0, again.byteLength).endpointOr(endpoint)).toBe(endpoint);
    const changes = [{ pid: 32 }, { sport: 8081 }, { dport: 51001 }, { saddr: [127, 0, 0, 3] }, { daddr: [127, 0, 0, 4] }, { comm: "server-2" }, { family: 10, saddr: mapped([127, 0, 0, 1]), daddr: mapped([127, 0, 0, 2]) }];
    for (const change of changes) {
      const other = httpRecord({ ...fields, ...change });
      const r = decodeHttpEventReused(other, 0, other.byteLength);
      expect(r, JSON.stringify(change)).toBe(e);
      const next = r.endpointOr(endpoint);
      expect(next, JSON.stringify(change)).not.toBe(endpoint);
      expect(next, JSON.stringify(change)).toMatchObject({ pid: r.pid, comm: r.comm, localAddress: r.localAddress, localPort: r.localPort, remoteAddress: r.remoteAddress, remotePort: r.remotePort });
    }
    expect(endpoint).toMatchObject({ pid: 31, comm: "server", localAddress: "127.0.0.1", localPort: 8080, remoteAddress: "127.0.0.2", remotePort: 51000 });
    /* IPv6: the same 32 address bytes keep the endpoint, one byte apart does not; the endpoint owns a copy of them. */
    const six = { ...fields, family: 10, saddr: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], daddr: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2] };
    const v6 = httpRecord(six);
    const e6 = decodeHttpEventReused(v6, 0, v6.byteLength).endpointOr(undefined);
    new Uint8Array(v6.buffer).fill(0);
    expect(e6).toMatchObject({ localAddress: "fd00::1", remoteAddress: "fd00::2" });
    const v6b = httpRecord(six);
    expect(decodeHttpEventReused(v6b, 0, v6b.byteLength).endpointOr(e6)).toBe(e6);
    const v6c = httpRecord({ ...six, daddr: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3] });
    expect(decodeHttpEventReused(v6c, 0, v6c.byteLength).endpointOr(e6)).toMatchObject({ remoteAddress: "fd00::3" });
  });

  test("http_event: the socket address as its two words and as a BigInt", () => {
    const v = httpRecord({ ts: 1n, sk: 0xffff888812345678n, off: 0, pid: 7, len: 1, io: 0, sport: 1, dport: 2, family: 2, saddr: [127, 0, 0, 1], daddr: [127, 0, 0, 1], comm: "x", data: "x" });
    const e = decodeHttpEventReused(v, 0, v.byteLength);
    expect([e.skLow, e.skHigh, e.sk]).toEqual([0x12345678, 0xffff8888, 0xffff888812345678n]);
  });

  test("http_event: IPv6 and IPv4-mapped addresses, a 16-byte task name, records at an offset of a shared buffer (copied)", () => {
    const a = httpRecord({ ts: 1n, sk: 1n, off: 0, pid: 7, len: 5, io: 0, sport: 443, dport: 50000, family: 10, saddr: mapped([10, 0, 0, 1]), daddr: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2], comm: "sixteen-chars-xx", data: "GET /" });
    const b = httpRecord({ ts: 2n, sk: 2n, off: 5, pid: 8, len: 3, io: 1, sport: 80, dport: 1, family: 2, saddr: [192, 168, 1, 254], daddr: [255, 0, 128, 1], comm: "b", data: "xyz" });
    const ring = new Uint8Array(16 + a.byteLength + b.byteLength);
    ring.set(new Uint8Array(a.buffer), 16);
    ring.set(new Uint8Array(b.buffer), 16 + a.byteLength);
    const view = new DataView(ring.buffer, 8);
    const ea = decodeHttpEvent(view, 8, a.byteLength);
    const eb = decodeHttpEvent(view, 8 + a.byteLength, b.byteLength);
    ring.fill(0);
    expect(ea).toMatchObject({ pid: 7, family: 10, localAddress: "10.0.0.1", remoteAddress: "fd00::2", comm: "sixteen-chars-xx" });
    expect(new TextDecoder().decode(ea.data)).toBe("GET /");
    expect(eb).toMatchObject({ pid: 8, streamOffset: 5, localAddress: "192.168.1.254", remoteAddress: "255.0.128.1", comm: "b" });
    expect(new TextDecoder().decode(eb.data)).toBe("xyz");
  });

  test("http_event: task names and IPv4 addresses stay exact across many records (names and addresses are kept for reuse)", () => {
    const names = Array.from({ length: 500 }, (_, i) => (i % 7 === 0 ? "x".repeat(16) : `task-${i.toString(36)}${"abcdefgh".slice(0, i % 9)}`).slice(0, 16));
    for (let round = 0; round < 3; round++)
      names.forEach((comm, i) => {
        const daddr = [10, (i >> 8) & 255, i & 255, round];
        const v = httpRecord({ ts: 1n, sk: 1n, off: 0, pid: 1, len: 1, io: 0, sport: 1, dport: 2, family: 2, saddr: [127, 0, 0, 1], daddr, comm, data: "x" });
        const e = decodeHttpEvent(v, 0, v.byteLength);
        expect(e.comm).toBe(comm);
        expect(e.remoteAddress).toBe(daddr.join("."));
        expect(e.localAddress).toBe("127.0.0.1");
      });
  });

  test("conn_event: task names and addresses stay exact across many records (kept for reuse), IPv4, v4-mapped and IPv6", () => {
    const names = Array.from({ length: 500 }, (_, i) => (i % 7 === 0 ? "y".repeat(16) : `conn-${i.toString(36)}${"abcdefgh".slice(0, i % 9)}`).slice(0, 16));
    for (let round = 0; round < 3; round++)
      names.forEach((comm, i) => {
        const daddr = [10, (i >> 8) & 255, i & 255, round];
        const v4 = connRecord({ kind: ConnKind.OPEN, ts: 1n, sk: 1n, start: 1n, est: 1n, sent: 0, recv: 0, pid: 1, retrans: 0, sport: 1, dport: 2, family: 2, dir: Direction.OUTBOUND, flags: 0, saddr: [127, 0, 0, 1], daddr, comm });
        const e4 = decodeConnEvent(v4, 0, v4.byteLength);
        expect([e4.comm, e4.localAddress, e4.remoteAddress]).toEqual([comm, "127.0.0.1", daddr.join(".")]);
        const six = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, round, (i >> 8) & 255, i & 255];
        const v6 = connRecord({ kind: ConnKind.OPEN, ts: 1n, sk: 1n, start: 1n, est: 1n, sent: 0, recv: 0, pid: 1, retrans: 0, sport: 1, dport: 2, family: 10, dir: Direction.INBOUND, flags: 0, saddr: mapped(daddr), daddr: six, comm });
        const e6 = decodeConnEvent(v6, 0, v6.byteLength);
        expect([e6.comm, e6.localAddress, e6.remoteAddress]).toEqual([comm, daddr.join("."), formatAddress(Uint8Array.from(six), 10)]);
      });
  });

  test("IPv6 text form follows RFC 5952", () => {
    const six = (...g: number[]) => Uint8Array.from(g.flatMap((x) => [x >> 8, x & 0xff]));
    expect(formatAddress(six(0, 0, 0, 0, 0, 0, 0, 1), 10)).toBe("::1");
    expect(formatAddress(six(0x2001, 0xdb8, 0, 0, 1, 0, 0, 1), 10)).toBe("2001:db8::1:0:0:1");
    expect(formatAddress(six(0x2001, 0xdb8, 1, 2, 3, 4, 5, 6), 10)).toBe("2001:db8:1:2:3:4:5:6");
    expect(formatAddress(six(0, 0, 0, 0, 0, 0, 0, 0), 10)).toBe("::");
  });
});
