import { describe, expect, test } from "bun:test";
import { decodeTlsEvent, TLS_EVENT_HEADER_BYTES } from "../../../../src/collectors/tls/decoder";
import { tlsRecord } from "./records";

describe("tls_event decoder", () => {
  test("reads every field at the offsets of the C struct", () => {
    const v = tlsRecord({ ts: 123n, ssl: 0x5555aaaa0000n, off: 2 ** 33 + 5, sk: 0xffff888000001000n, pid: 4242, len: 9000, io: 1, sport: 443, dport: 51000, saddr: [10, 0, 0, 1], daddr: [10, 0, 0, 2], comm: "python3", data: "HTTP/1.1 200 OK\r\n" });
    const e = decodeTlsEvent(v, 0, v.byteLength);
    expect(e).toMatchObject({
      type: "tls", timestampNs: 123n, ssl: 0x5555aaaa0000n, streamOffset: 2 ** 33 + 5, sk: 0xffff888000001000n, cgroupId: 77n, pid: 4242, tid: 4243,
      length: 9000, io: 1, socketKnown: true, localAddress: "10.0.0.1", localPort: 443, remoteAddress: "10.0.0.2", remotePort: 51000, family: 2, comm: "python3",
    });
    expect(new TextDecoder().decode(e.data)).toBe("HTTP/1.1 200 OK\r\n");
  });

  test("the record is copied: the ring's bytes may be reused after the call", () => {
    const v = tlsRecord({ ts: 1n, ssl: 1n, off: 0, pid: 1, io: 0, data: "GET / HTTP/1.1\r\n" });
    const e = decodeTlsEvent(v, 0, v.byteLength);
    new Uint8Array(v.buffer).fill(0);
    expect(new TextDecoder().decode(e.data)).toBe("GET / HTTP/1.1\r\n");
  });

  test("FLAG_H2_STOPPED: a header-only record saying the kernel stopped forwarding the connection; FLAG_H2_MIDSTREAM", () => {
    const v = tlsRecord({ ts: 1n, ssl: 1n, off: 900, pid: 1, len: 300, io: 0, h2Stopped: true, data: "" });
    expect(decodeTlsEvent(v, 0, v.byteLength)).toMatchObject({ h2Stopped: true, socketKnown: true, streamOffset: 900, length: 300, data: new Uint8Array(0) });
    const plain = tlsRecord({ ts: 1n, ssl: 1n, off: 0, pid: 1, io: 0, data: "x" });
    expect(decodeTlsEvent(plain, 0, plain.byteLength).h2Stopped).toBe(false);
    expect(decodeTlsEvent(plain, 0, plain.byteLength).h2Midstream).toBe(false);
    const middle = tlsRecord({ ts: 1n, ssl: 1n, off: 900, pid: 1, len: 9, io: 0, h2Midstream: true, data: "" });
    expect(decodeTlsEvent(middle, 0, middle.byteLength)).toMatchObject({ h2Midstream: true, h2Stopped: false });
  });

  test("without a known socket the addresses are empty", () => {
    const v = tlsRecord({ ts: 1n, ssl: 1n, off: 0, pid: 1, io: 0, socket: false, saddr: [1, 2, 3, 4], data: "x" });
    expect(decodeTlsEvent(v, 0, v.byteLength)).toMatchObject({ socketKnown: false, localAddress: "", remoteAddress: "" });
  });

  test("an HTTP/2 connection's record carries up to 4 KiB; more is a RangeError", () => {
    const big = tlsRecord({ ts: 1n, ssl: 1n, off: 0, pid: 1, io: 0, data: "x".repeat(4096) });
    expect(decodeTlsEvent(big, 0, big.byteLength).data.length).toBe(4096);
    const over = tlsRecord({ ts: 1n, ssl: 1n, off: 0, pid: 1, io: 0, data: "x".repeat(4097) });
    expect(() => decodeTlsEvent(over, 0, over.byteLength)).toThrow(RangeError);
  });

  test("a short or inconsistent record is a RangeError", () => {
    const v = tlsRecord({ ts: 1n, ssl: 1n, off: 0, pid: 1, io: 0, data: "abcd" });
    expect(() => decodeTlsEvent(v, 0, TLS_EVENT_HEADER_BYTES - 1)).toThrow(RangeError);
    expect(() => decodeTlsEvent(v, 0, TLS_EVENT_HEADER_BYTES + 2)).toThrow(RangeError);
  });
});
