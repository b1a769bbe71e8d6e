/** Byte fixtures: `struct tls_event` laid out as ffi/bpf/tls.bpf.c writes it. */
import { TLS_EVENT_HEADER_BYTES } from "../../../../src/collectors/tls/decoder";

export function tlsRecord(o: { ts: bigint; ssl: bigint; off: number; sk?: bigint; pid: number; len?: number; io: number; socket?: boolean; h2Stopped?: boolean; h2Midstream?: boolean; sport?: number; dport?: number; family?: number; saddr?: number[]; daddr?: number[]; comm?: string; data: string }): DataView {
  const bytes = new TextEncoder().encode(o.data);
  const v = new DataView(new ArrayBuffer(TLS_EVENT_HEADER_BYTES + bytes.length));
  v.setBigUint64(0, o.ts, true);
  v.setBigUint64(8, o.ssl, true);
  v.setBigUint64(16, BigInt(o.off), true);
  v.setBigUint64(24, o.sk ?? 0n, true);
  v.setBigUint64(32, 77n, true);
  v.setUint32(40, o.pid, true);
  v.setUint32(44, o.pid + 1, true);
  v.setUint32(48, o.len ?? bytes.length, true);
  v.setUint16(52, bytes.length, true);
  v.setUint8(54, o.io);
  v.setUint8(55, (o.socket === false ? 0 : 1) | (o.h2Stopped ? 2 : 0) | (o.h2Midstream ? 4 : 0));
  v.setUint16(56, o.sport ?? 0, true);
  v.setUint16(58, o.dport ?? 0, true);
  v.setUint16(60, o.family ?? 2, true);
  (o.saddr ?? []).forEach((x, i) => v.setUint8(64 + i, x));
  (o.daddr ?? []).forEach((x, i) => v.setUint8(80 + i, x));
  [...(o.comm ?? "")].forEach((c, i) => v.setUint8(96 + i, c.charCodeAt(0)));
  bytes.forEach((b, i) => v.setUint8(TLS_EVENT_HEADER_BYTES + i, b));
  return v;
}
