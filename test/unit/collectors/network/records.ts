/** Byte fixtures: records laid out as ffi/bpf/network.bpf.c writes them. */
import { CONN_EVENT_BYTES, HTTP_EVENT_HEADER_BYTES } from "../../../../src/collectors/network/decoders";

/** A struct conn_event as the kernel writes it (offsets of ffi/bpf/network.bpf.c). */
export function connRecord(o: { kind: number; ts: bigint; sk: bigint; start: bigint; est: bigint; sent: number; recv: number; pid: number; retrans: number; sport: number; dport: number; family: number; dir: number; flags: number; saddr: number[]; daddr: number[]; comm: string; reportedSent?: number; reportedRecv?: number }): DataView {
  const v = new DataView(new ArrayBuffer(CONN_EVENT_BYTES));
  v.setBigUint64(0, o.ts, true);
  v.setBigUint64(8, o.sk, true);
  v.setUint32(16, o.kind, true);
  const b = 24;
  v.setBigUint64(b + 0, o.start, true);
  v.setBigUint64(b + 8, o.est, true);
  v.setBigUint64(b + 16, BigInt(o.sent), true);
  v.setBigUint64(b + 24, BigInt(o.recv), true);
  v.setBigUint64(b + 32, 77n, true);
  v.setUint32(b + 40, o.pid, true);
  v.setUint32(b + 44, o.retrans, true);
  v.setUint16(b + 48, o.sport, true);
  v.setUint16(b + 50, o.dport, true);
  v.setUint16(b + 52, o.family, true);
  v.setUint8(b + 54, o.dir);
  v.setUint8(b + 55, o.flags);
  o.saddr.forEach((x, i) => v.setUint8(b + 56 + i, x));
  o.daddr.forEach((x, i) => v.setUint8(b + 72 + i, x));
  [...o.comm].forEach((c, i) => v.setUint8(b + 88 + i, c.charCodeAt(0)));
  v.setBigUint64(b + 112, BigInt(o.reportedSent ?? 0), true);
  v.setBigUint64(b + 120, BigInt(o.reportedRecv ?? 0), true);
  return v;
}

export function httpRecord(o: { ts: bigint; sk: bigint; off: number; pid: number; len: number; io: number; sport: number; dport: number; family: number; saddr: number[]; daddr: number[]; comm: string; data: string | Uint8Array; flags?: number }): DataView {
  const bytes = typeof o.data === "string" ? new TextEncoder().encode(o.data) : o.data;
  const v = new DataView(new ArrayBuffer(HTTP_EVENT_HEADER_BYTES + bytes.length));
  v.setBigUint64(0, o.ts, true);
  v.setBigUint64(8, o.sk, true);
  v.setBigUint64(16, BigInt(o.off), true);
  v.setUint32(32, o.pid, true);
  v.setUint32(36, o.pid, true);
  v.setUint32(40, o.len, true);
  v.setUint16(44, bytes.length, true);
  v.setUint8(46, o.io);
  v.setUint16(48, o.sport, true);
  v.setUint16(50, o.dport, true);
  v.setUint16(52, o.family, true);
  v.setUint16(54, o.flags ?? 0, true);
  o.saddr.forEach((x, i) => v.setUint8(56 + i, x));
  o.daddr.forEach((x, i) => v.setUint8(72 + i, x));
  [...o.comm].forEach((c, i) => v.setUint8(88 + i, c.charCodeAt(0)));
  new Uint8Array(v.buffer).set(bytes, HTTP_EVENT_HEADER_BYTES);
  return v;
}

