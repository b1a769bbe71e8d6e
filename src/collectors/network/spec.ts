/**
 * The `network` program set as data (ffi/bpf/network.bpf.c): TCP lifecycle tracepoints (required; with
 * http_capture `socket` the sock_*_length ones also capture HTTP bytes), the HTTP capture syscall tracepoints
 * (optional; only with http_capture `syscalls`), and the kprobe that adds precision where kprobes exist
 * (optional: `attached: false` on kernels without them).
 */
import type { ProgramSetSpec, ProgramSpec } from "../../ebpf/spec";
import { decodeConnEvent, decodeHttpEvent, type NetworkEvent } from "./decoders";

export interface NetworkSetOptions {
  /** The agent's own pid: never traced. */
  selfPid: number;
  http: boolean;
  /** Where the kernel finds HTTP bytes (agent.ebpf.network.http_capture). */
  httpCapture: "socket" | "syscalls";
  /** HTTP exchanges captured per second in the kernel. */
  httpExchangesPerSecond: number;
  /** Entries of the `conns` map. */
  maxConnections: number;
}

/** CAPTURE_* in the C program. */
export const CaptureMode = { OFF: 0, SYSCALLS: 1, SOCKET: 2 } as const;

const tp = (name: string, category: string, event: string, required: boolean): ProgramSpec => ({ name, attach: { kind: "tracepoint", category, name: event }, required });

export const LIFECYCLE_PROGRAMS: ProgramSpec[] = [
  tp("on_set_state", "sock", "inet_sock_set_state", true),
  tp("on_send_length", "sock", "sock_send_length", true),
  tp("on_recv_length", "sock", "sock_recv_length", true),
  tp("on_retransmit", "tcp", "tcp_retransmit_skb", false),
  { name: "on_tcp_connect", attach: { kind: "kprobe", func: "tcp_connect" }, required: false },
];

const CAPTURED_SYSCALLS = ["read", "recvfrom", "readv", "write", "sendto", "writev"] as const;

export const HTTP_PROGRAMS: ProgramSpec[] = CAPTURED_SYSCALLS.flatMap((s) => [
  tp(`enter_${s}`, "syscalls", `sys_enter_${s}`, false),
  tp(`exit_${s}`, "syscalls", `sys_exit_${s}`, false),
]);

export function networkSetSpec(o: NetworkSetOptions): ProgramSetSpec<NetworkEvent> {
  return {
    name: "network",
    object: "network",
    programs: o.http && o.httpCapture === "syscalls" ? [...LIFECYCLE_PROGRAMS, ...HTTP_PROGRAMS] : LIFECYCLE_PROGRAMS,
    ringBuffers: [
      { map: "conn_events", lostMap: "conn_events_lost", decode: decodeConnEvent },
      { map: "http_events", lostMap: "http_events_lost", decode: decodeHttpEvent },
    ],
    constants: { self_tgid: o.selfPid, capture_http: !o.http ? CaptureMode.OFF : o.httpCapture === "syscalls" ? CaptureMode.SYSCALLS : CaptureMode.SOCKET, http_requests_per_second: o.httpExchangesPerSecond },
    mapSizes: { conns: o.maxConnections },
  };
}

/** Indexes of the `stats` per-CPU array (STAT_* in the C program). */
export const NetworkStat = { CONNS_FULL: 0, PENDING_FULL: 1, HTTP_SAMPLED_OUT: 2, HTTP_EVENTS: 3 } as const;
