/**
 * The `tls` program set as data (ffi/bpf/tls.bpf.c): the SSL_* entry and return probes, loaded here and attached
 * per library file by the component (`manual`), the socket-length tp_btf programs that tie a call to its socket
 * (optional: without them spans carry no addresses; left out where the network set's programs do that work,
 * `socketCallsInNetworkSet`) and the close tracepoint that counts a request never answered as
 * a transport error (optional: without it such a request is not counted). HTTP/1.x exchanges beyond
 * `exchangesPerSecond` (agent.ebpf.network.max_spans_per_second) are not captured in the kernel, as for cleartext;
 * HTTP/2 calls beyond `h2RecordsPerSecond` (agent.ebpf.network.http2_records_per_second, a window of the set's own)
 * stop their connection's forwarding, as for cleartext.
 */
import { existsSync } from "node:fs";
import { EXCHANGE_SHARED_MAPS, TLS_SOCKET_SHARED_MAPS, type ProgramSetSpec, type ProgramSpec } from "../../ebpf/spec";
import { decodeTlsEvent, type TlsEvent } from "./decoder";
import type { TlsFunction } from "./targets";

/** The entry program of each probed function; every return goes to TLS_RETURN_PROGRAM. */
export const TLS_ENTRY_PROGRAMS: Record<TlsFunction, string> = {
  SSL_write: "ssl_write_enter",
  SSL_write_ex: "ssl_write_ex_enter",
  SSL_read: "ssl_read_enter",
  SSL_read_ex: "ssl_read_ex_enter",
};
export const TLS_RETURN_PROGRAM = "ssl_leave";

const tpBtf = (name: string): ProgramSpec => ({ name, attach: { kind: "tp_btf" }, required: false });
const manual = (name: string, kind: "uprobe" | "uretprobe", func: string): ProgramSpec => ({ name, attach: { kind, binary: "", func }, required: true, manual: true });

/** Indexes of the `tls_stats` per-CPU array (STAT_* in the C program). */
export const TlsStat = { SAMPLED_OUT: 0, EVENTS: 1, H2_STOPPED_LOST: 2, H2_STOPPED: 3, RING_BUSY: 4, H2_MIDSTREAM: 5, RED_REPLACED: 6, H2_RESUMED: 7 } as const;

const VMLINUX_BTF = "/sys/kernel/btf/vmlinux";

/**
 * `redCounted`: HTTP/1.x exchanges count in the RED maps shared with the network set (its redCounted).
 * `kernelBtf` (default: whether /sys/kernel/btf/vmlinux exists): a thread's SSL call is kept in task storage; without
 * kernel BTF it is kept in a hash by thread id, and the socket programs (tp_btf) are left out: spans then carry no
 * addresses and an unanswered close is not counted.
 * `socketCallsInNetworkSet` (the network set's tlsSocketCallsInNetworkSet): the network set's socket storage programs
 * run the socket call part (ffi/bpf/tls-socket.h), so this set leaves out its own `tls_send_length` and
 * `tls_recv_length` and shares that part's maps with it. Those maps then outlive this set: the ones its programs and
 * user space fill are emptied before it attaches.
 */
/** The tls set's limits as its .data globals: set before load, and in place while it runs (see networkLimits). */
export function tlsLimits(exchangesPerSecond: number, h2RecordsPerSecond: number): Record<string, number> {
  return { exchanges_per_second: exchangesPerSecond, h2_records_per_second: h2RecordsPerSecond };
}

export function tlsSetSpec(o: { selfPid: number; exchangesPerSecond: number; h2RecordsPerSecond: number; redCounted?: boolean; kernelBtf?: boolean; socketCallsInNetworkSet?: boolean }): ProgramSetSpec<TlsEvent> {
  const btf = o.kernelBtf ?? existsSync(VMLINUX_BTF);
  const inNetwork = btf && o.socketCallsInNetworkSet === true;
  return {
    name: "tls",
    object: "tls",
    programs: [
      ...Object.entries(TLS_ENTRY_PROGRAMS).map(([func, name]) => manual(name, "uprobe", func)),
      manual(TLS_RETURN_PROGRAM, "uretprobe", "SSL_*"),
      ...(btf ? [...(inNetwork ? [] : [tpBtf("tls_send_length"), tpBtf("tls_recv_length")]), tpBtf("tls_sock_close")] : []),
    ],
    ringBuffers: [{ map: "tls_events", lostMap: "tls_events_lost", decode: decodeTlsEvent }],
    constants: { self_tgid: o.selfPid, red_enabled: o.redCounted ? 1 : 0, task_storage: btf ? 1 : 0 },
    variables: tlsLimits(o.exchangesPerSecond, o.h2RecordsPerSecond),
    ...(btf ? { mapSizes: { active_by_tid: 1 } } : { mapsLeftOut: ["active"] }),
    ...(inNetwork ? { sharedMaps: [...EXCHANGE_SHARED_MAPS, ...TLS_SOCKET_SHARED_MAPS], emptiedMaps: ["tls_conns", "tls_socks", "tls_tgids"] } : { sharedMaps: EXCHANGE_SHARED_MAPS }),
  };
}
