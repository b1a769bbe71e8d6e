/**
 * Pure decoder of the `tls` set's records (ffi/bpf/tls.bpf.c `struct tls_event` on `tls_events`): the plaintext
 * an SSL_read/SSL_write call moved, with the SSL object, the socket and its addresses when known, and the stream
 * offset of the bytes. Offsets mirror the C struct (asserted there with _Static_assert). Little-endian.
 */
import { AF_INET, cString, type CapturedCall } from "../network/decoders";
import { formatAddress } from "../network/addresses";

export const TLS_EVENT_HEADER_BYTES = 112;
/** TLS_CAPTURE_BYTES in the C program: the most plaintext bytes captured per call of HTTP/1.x. */
export const TLS_CAPTURE_BYTES = 512;
/** H2_CAPTURE_BYTES in the C program: the most captured per call of an HTTP/2 connection (the bound of a record). */
export const TLS_MAX_CAPTURE_BYTES = 4096;
/** FLAG_SOCKET: the socket (and so the addresses) of the SSL object is known. */
export const TLS_FLAG_SOCKET = 1;
/** FLAG_H2_STOPPED: a header-only record saying the kernel stopped forwarding this HTTP/2 connection. */
export const TLS_FLAG_H2_STOPPED = 2;
/** FLAG_H2_MIDSTREAM: a call of an HTTP/2 connection the kernel found in its middle (an SSL object older than the probes). */
export const TLS_FLAG_H2_MIDSTREAM = 4;
/** FLAG_H2_RESUMED: the first call forwarded of a stopped HTTP/2 connection forwarded again, or the first with frames after a cut one (and that call's further records). */
export const TLS_FLAG_H2_RESUMED = 8;

const F = {
  timestampNs: 0, ssl: 8, streamOffset: 16, sk: 24, cgroupId: 32, pid: 40, tid: 44, len: 48, captured: 52, io: 54, flags: 55,
  sport: 56, dport: 58, family: 60, saddr: 64, daddr: 80, comm: 96, data: 112,
} as const;

export interface TlsEvent extends CapturedCall {
  readonly type: "tls";
  /** Kernel monotonic ns: the call's entry for writes, its return for reads. */
  timestampNs: bigint;
  /** Address of the SSL object in the process (the connection's identity while it lives). */
  ssl: bigint;
  /** Plaintext bytes moved in this direction on this SSL object before this call. */
  streamOffset: number;
  /** Kernel address of the socket, 0n while unknown. */
  sk: bigint;
  cgroupId: bigint;
  pid: number;
  tid: number;
  /** Plaintext bytes moved by the call. */
  length: number;
  /** 0: the process read them (SSL_read), 1: it wrote them (SSL_write). */
  io: 0 | 1;
  /** Whether the socket, and so the addresses below, are known. */
  socketKnown: boolean;
  /** The kernel stopped forwarding this HTTP/2 connection here (h2_records_per_second or ring pressure): no data. */
  h2Stopped: boolean;
  /** A call of an HTTP/2 connection the kernel found in its middle: decoded with partial HPACK tables. */
  h2Midstream: boolean;
  /** The kernel forwards this stopped (or cut) HTTP/2 connection again from this call (FLAG_H2_RESUMED). */
  h2Resumed: boolean;
}

/** Decodes a tls_event; the result owns a copy of the record. Throws RangeError on a short or inconsistent record. */
export function decodeTlsEvent(view: DataView, offset: number, length: number): TlsEvent {
  if (length < TLS_EVENT_HEADER_BYTES) throw new RangeError(`tls_event: ${length} bytes, need ${TLS_EVENT_HEADER_BYTES}`);
  const captured = view.getUint16(offset + F.captured, true);
  if (captured > TLS_MAX_CAPTURE_BYTES || TLS_EVENT_HEADER_BYTES + captured > length) {
    throw new RangeError(`tls_event: ${captured} captured bytes do not fit a ${length}-byte record`);
  }
  const start = view.byteOffset + offset;
  const record = view.buffer.slice(start, start + TLS_EVENT_HEADER_BYTES + captured) as ArrayBuffer;
  const v = new DataView(record);
  const family = v.getUint16(F.family, true);
  const socketKnown = (v.getUint8(F.flags) & TLS_FLAG_SOCKET) !== 0;
  const n = family === AF_INET ? 4 : 16;
  return {
    type: "tls",
    timestampNs: v.getBigUint64(F.timestampNs, true),
    ssl: v.getBigUint64(F.ssl, true),
    streamOffset: v.getUint32(F.streamOffset, true) + v.getUint32(F.streamOffset + 4, true) * 2 ** 32,
    sk: v.getBigUint64(F.sk, true),
    cgroupId: v.getBigUint64(F.cgroupId, true),
    pid: v.getUint32(F.pid, true),
    tid: v.getUint32(F.tid, true),
    length: v.getUint32(F.len, true),
    io: (v.getUint8(F.io) & 1) as 0 | 1,
    socketKnown,
    h2Stopped: (v.getUint8(F.flags) & TLS_FLAG_H2_STOPPED) !== 0,
    h2Midstream: (v.getUint8(F.flags) & TLS_FLAG_H2_MIDSTREAM) !== 0,
    h2Resumed: (v.getUint8(F.flags) & TLS_FLAG_H2_RESUMED) !== 0,
    localAddress: socketKnown ? formatAddress(new Uint8Array(record, F.saddr, n), family) : "",
    localPort: v.getUint16(F.sport, true),
    remoteAddress: socketKnown ? formatAddress(new Uint8Array(record, F.daddr, n), family) : "",
    remotePort: v.getUint16(F.dport, true),
    family,
    comm: cString(v, F.comm, 16),
    data: new Uint8Array(record, F.data, captured),
  };
}
