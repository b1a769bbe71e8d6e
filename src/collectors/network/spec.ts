/**
 * The `network` program set as data (ffi/bpf/network.bpf.c): TCP lifecycle and socket length programs
 * (required; with http_capture `socket` the length ones also capture HTTP bytes), the HTTP capture syscall
 * tracepoints (optional; only with http_capture `syscalls`), and the kprobe that adds precision where kprobes
 * exist (optional: `attached: false` on kernels without them). The lifecycle programs come in two families:
 * where the kernel has BTF, BTF-enabled tracepoints (tp_btf: no trace record formatted on every socket read
 * and write) keeping each connection in per-socket storage (no hash lookup per call); otherwise, and with
 * http_capture `syscalls` (whose syscall exits know only the socket's address), classic tracepoints (`*_tp`)
 * keeping connections in the `conns` hash.
 */
import { existsSync } from "node:fs";
import type { NetworkConfig } from "./config";
import { kernelAtLeast } from "../../ebpf/features";
import { EXCHANGE_SHARED_MAPS, TLS_SOCKET_SHARED_MAPS, type ProgramSetSpec, type ProgramSpec } from "../../ebpf/spec";
import { decodeConnEvent, decodeHttpEventReused, HTTP_CAPTURE_BYTES, HTTP_EVENT_HEADER_BYTES, type NetworkEvent } from "./decoders";

/** Ring records one captured exchange takes on average (request, its continuation, the response's last call). */
const HTTP_RECORDS_PER_EXCHANGE = 4;
/** One record in the ring: its 8-byte header, the event header and a full capture. */
const HTTP_RECORD_BYTES = 8 + HTTP_EVENT_HEADER_BYTES + HTTP_CAPTURE_BYTES;
const MIN_HTTP_RING_BYTES = 256 * 1024;
const MAX_HTTP_RING_BYTES = 8 * 2 ** 20;

/** h2_records_per_second's default (the configuration's). */
export const DEFAULT_H2_RECORDS_PER_SECOND = 50_000;
/** An HTTP/2 record as sized for the ring: its 8-byte header, the event header and the frames of a few streams. */
const H2_RECORD_BYTES = 8 + HTTP_EVENT_HEADER_BYTES + 256;
/**
 * Seconds of http2_records_per_second the http ring holds with `auto`: how long user space may fall behind an
 * HTTP/2 load at the limit before the ring is three quarters full and the kernel stops forwarding connections.
 */
const H2_RING_SECONDS = 0.1;

/**
 * http_events with `ringbuf_size: auto`: one second of the exchange budget (the kernel captures no more HTTP/1.x), or
 * a tenth of a second of the HTTP/2 record limit when larger (HTTP/2 connections are forwarded whole), within
 * 256KiB..8MiB.
 */
export function httpRingAutoBytes(exchangesPerSecond: number, h2RecordsPerSecond = 0): number {
  const bytes = Math.max(exchangesPerSecond * HTTP_RECORDS_PER_EXCHANGE * HTTP_RECORD_BYTES, h2RecordsPerSecond * H2_RECORD_BYTES * H2_RING_SECONDS);
  return Math.min(MAX_HTTP_RING_BYTES, Math.max(MIN_HTTP_RING_BYTES, bytes));
}

export interface NetworkSetOptions {
  /** The agent's own pid: never traced. */
  selfPid: number;
  http: boolean;
  /** Where the kernel finds HTTP bytes (agent.ebpf.network.http_capture). */
  httpCapture: "socket" | "syscalls";
  /** HTTP exchanges captured per second in the kernel. */
  httpExchangesPerSecond: number;
  /** Records of HTTP/2 connections forwarded per second (agent.ebpf.network.http2_records_per_second; default 50000). */
  h2RecordsPerSecond?: number;
  /** Connections tracked at most (entries of `conns`, or of the per-socket storage with kernel BTF). */
  maxConnections: number;
  /** Count every HTTP exchange in the kernel (RED metrics); effective with socket capture and socket storage only. */
  redMetrics?: boolean;
  /** With redMetrics counted in the kernel: the body sizes of each exchange too (ffi/bpf/red-body.h). */
  redBodySizes?: boolean;
  /** The `tls` set is loaded beside this one (agent.ebpf.network.tls): see tlsSocketCallsInNetworkSet. */
  tls?: boolean;
  /** Whether the kernel has BTF (tp_btf programs); defaults to whether /sys/kernel/btf/vmlinux exists. */
  kernelBtf?: boolean;
  /**
   * Whether the kernel has the bpf_rdonly_cast kfunc (6.2+), which the socket length programs use to read the saved
   * user registers and the TCP clock without helper calls; without it their `_compat` twins (helpers only) are
   * loaded. Defaults to the running kernel's release (KFUNC_CAST_MIN_KERNEL or newer).
   */
  kfuncCast?: boolean;
}

/** The first kernel with the bpf_rdonly_cast kfunc, callable from tracing programs. */
export const KFUNC_CAST_MIN_KERNEL = "6.2";

const VMLINUX_BTF = "/sys/kernel/btf/vmlinux";

/** CAPTURE_* in the C program. */
export const CaptureMode = { OFF: 0, SYSCALLS: 1, SOCKET: 2 } as const;

const tp = (name: string, category: string, event: string, required: boolean): ProgramSpec => ({ name, attach: { kind: "tracepoint", category, name: event }, required });

/**
 * The lifecycle programs: with `socketStorage` (kernel BTF) the tp_btf family on per-socket storage
 * (`on_set_state`, `on_send_length`, `on_recv_length`, `on_retransmit`; without `kfuncCast` the socket length
 * programs' `_compat` twins), else the classic tracepoints on the `conns` hash (the same names with `_tp`).
 */
export function lifecyclePrograms(socketStorage: boolean, kfuncCast = true): ProgramSpec[] {
  const lengths = kfuncCast ? "" : "_compat";
  const family: ProgramSpec[] = socketStorage
    ? [
        { name: "on_set_state", attach: { kind: "tp_btf" }, required: true },
        { name: `on_send_length${lengths}`, attach: { kind: "tp_btf" }, required: true },
        { name: `on_recv_length${lengths}`, attach: { kind: "tp_btf" }, required: true },
        { name: "on_retransmit", attach: { kind: "tp_btf" }, required: false },
      ]
    : [
        tp("on_set_state_tp", "sock", "inet_sock_set_state", true),
        tp("on_send_length_tp", "sock", "sock_send_length", true),
        tp("on_recv_length_tp", "sock", "sock_recv_length", true),
        tp("on_retransmit_tp", "tcp", "tcp_retransmit_skb", false),
      ];
  return [...family, { name: "on_tcp_connect", attach: { kind: "kprobe", func: "tcp_connect" }, required: false }];
}

const CAPTURED_SYSCALLS = ["read", "recvfrom", "readv", "recvmsg", "write", "sendto", "writev", "sendmsg"] as const;

export const HTTP_PROGRAMS: ProgramSpec[] = CAPTURED_SYSCALLS.flatMap((s) => [
  tp(`enter_${s}`, "syscalls", `sys_enter_${s}`, false),
  tp(`exit_${s}`, "syscalls", `sys_exit_${s}`, false),
]);

/** Whether the kernel counts every HTTP exchange (RED metrics): socket capture on per-socket storage (kernel BTF). */
export function redCounted(o: Pick<NetworkSetOptions, "http" | "httpCapture" | "redMetrics" | "kernelBtf">): boolean {
  return o.http && o.httpCapture === "socket" && o.redMetrics === true && (o.kernelBtf ?? existsSync(VMLINUX_BTF));
}

/**
 * Whether this set's socket storage programs (kernel BTF, http_capture socket) run the `tls` set's socket call part
 * (ffi/bpf/tls-socket.h) in place of its own programs on sock_send_length / sock_recv_length: one program a socket
 * call instead of two. The tls set then leaves its own out (src/collectors/tls/spec.ts) and the two share that
 * part's maps.
 */
export function tlsSocketCallsInNetworkSet(o: Pick<NetworkSetOptions, "http" | "httpCapture" | "tls" | "kernelBtf">): boolean {
  return o.http && o.tls === true && o.httpCapture === "socket" && (o.kernelBtf ?? existsSync(VMLINUX_BTF));
}

/** tlsSocketCallsInNetworkSet for agent.ebpf.network as configured. */
export function configTlsSocketCallsInNetworkSet(c: NetworkConfig): boolean {
  return c.enabled && tlsSocketCallsInNetworkSet({ http: c.http, httpCapture: c.http_capture, tls: c.tls });
}

/** redCounted for agent.ebpf.network as configured (the network and tls sets count in the same RED maps). */
export function configRedCounted(c: NetworkConfig): boolean {
  return redCounted({ http: c.http, httpCapture: c.http_capture, redMetrics: c.http_metrics });
}

/** The kernel's exchange budget when it lets every exchange through (user space applies the span cap). */
export const UNCAPPED_EXCHANGES_PER_SECOND = 4_000_000_000;

/**
 * Whether RED metrics are counted in user space from decoded exchanges: http_metrics on where the kernel cannot
 * count (http_capture syscalls, or no kernel BTF). The kernel then captures every exchange (no per-second budget;
 * only a half-full ring refuses one) and user space counts each before the span cap applies.
 */
export function userRedCounted(c: NetworkConfig): boolean {
  return c.http && c.http_metrics && !configRedCounted(c);
}

/** HTTP exchanges the kernel captures per second (cleartext and TLS): max_spans_per_second, or all of them when userRedCounted. */
export function kernelExchangesPerSecond(c: NetworkConfig): number {
  return userRedCounted(c) ? UNCAPPED_EXCHANGES_PER_SECOND : c.max_spans_per_second;
}

/**
 * The network set's limits as its .data globals: set before load, and in place while it runs when a reload changes
 * only them (max_spans_per_second, http2_records_per_second), so that no exchange in flight is missed.
 */
export function networkLimits(exchangesPerSecond: number, h2RecordsPerSecond: number): Record<string, number> {
  return { http_requests_per_second: exchangesPerSecond, h2_records_per_second: h2RecordsPerSecond };
}

export function networkSetSpec(o: NetworkSetOptions): ProgramSetSpec<NetworkEvent> {
  const syscallCapture = o.http && o.httpCapture === "syscalls";
  const bodySizes = redCounted(o) && o.redBodySizes === true;
  const socketStorage = (o.kernelBtf ?? existsSync(VMLINUX_BTF)) && !syscallCapture;
  const tlsFollow = tlsSocketCallsInNetworkSet(o);
  return {
    name: "network",
    object: "network",
    programs: [...lifecyclePrograms(socketStorage, o.kfuncCast ?? kernelAtLeast(KFUNC_CAST_MIN_KERNEL)), ...(syscallCapture ? HTTP_PROGRAMS : [])],
    ringBuffers: [
      { map: "conn_events", lostMap: "conn_events_lost", decode: decodeConnEvent },
      { map: "http_events", lostMap: "http_events_lost", decode: decodeHttpEventReused, autoSizeBytes: o.http ? httpRingAutoBytes(o.httpExchangesPerSecond, o.h2RecordsPerSecond ?? DEFAULT_H2_RECORDS_PER_SECOND) : 4096 },
    ],
    constants: {
      self_tgid: o.selfPid,
      capture_http: !o.http ? CaptureMode.OFF : o.httpCapture === "syscalls" ? CaptureMode.SYSCALLS : CaptureMode.SOCKET,
      max_conns: o.maxConnections,
      red_enabled: redCounted(o) ? 1 : 0,
      red_body_sizes: bodySizes ? 1 : 0,
      tls_follow: tlsFollow ? 1 : 0,
    },
    variables: networkLimits(o.httpExchangesPerSecond, o.h2RecordsPerSecond ?? DEFAULT_H2_RECORDS_PER_SECOND),
    // With per-socket storage (max_conns bounds it) the hash is left unused but by the optional kprobe: one entry.
    // The body size maps (preallocated per CPU) take room only while body sizes are counted.
    mapSizes: { conns: socketStorage ? 1 : o.maxConnections, ...(bodySizes ? {} : { red_body_a: 1, red_body_b: 1 }) },
    // Without the tls set's socket call part its maps are not created (the verifier prunes the code using them).
    ...(tlsFollow ? {} : { mapsLeftOut: TLS_SOCKET_SHARED_MAPS }),
    sharedMaps: tlsFollow ? [...EXCHANGE_SHARED_MAPS, ...TLS_SOCKET_SHARED_MAPS] : EXCHANGE_SHARED_MAPS,
    // The agent's own endpoints: recorded as its connections open and removed as they close, by this set alone.
    emptiedMaps: ["svc_self_peers"],
  };
}

/** Indexes of the `stats` per-CPU array (STAT_* in the C program). */
export const NetworkStat = { CONNS_FULL: 0, PENDING_FULL: 1, HTTP_SAMPLED_OUT: 2, HTTP_EVENTS: 3, RED_REPLACED: 4, HTTP_RING_BUSY: 5, H2_STOPPED_LIMIT: 6, H2_STOPPED_LOST: 7, H2_CUT: 8, H2_STOPPED_RING: 9, NOT_HTTP: 10, H2_MIDSTREAM: 11, H2_RESUMED: 12 } as const;
