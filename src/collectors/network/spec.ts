/**
 * The `network` program set as data (ffi/bpf/network.bpf.c): TCP lifecycle tracepoints (required; with
 * http_capture `socket` the sock_*_length ones also capture HTTP bytes; those two run as BTF-enabled
 * tracepoints where the kernel has BTF, which skips formatting a trace record on every socket read and write,
 * and as classic tracepoints otherwise), the HTTP capture syscall tracepoints
 * (optional; only with http_capture `syscalls`), and the kprobe that adds precision where kprobes exist
 * (optional: `attached: false` on kernels without them).
 */
import { existsSync } from "node:fs";
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
  /** Whether the kernel has BTF (tp_btf programs); defaults to whether /sys/kernel/btf/vmlinux exists. */
  kernelBtf?: boolean;
}

const VMLINUX_BTF = "/sys/kernel/btf/vmlinux";

/** CAPTURE_* in the C program. */
export const CaptureMode = { OFF: 0, SYSCALLS: 1, SOCKET: 2 } as const;

const tp = (name: string, category: string, event: string, required: boolean): ProgramSpec => ({ name, attach: { kind: "tracepoint", category, name: event }, required });

/** The lifecycle programs; the socket length ones as tp_btf (`on_*_length`) or classic tracepoints (`on_*_length_tp`). */
export function lifecyclePrograms(kernelBtf: boolean): ProgramSpec[] {
  const length: ProgramSpec[] = kernelBtf
    ? [
        { name: "on_send_length", attach: { kind: "tp_btf" }, required: true },
        { name: "on_recv_length", attach: { kind: "tp_btf" }, required: true },
      ]
    : [tp("on_send_length_tp", "sock", "sock_send_length", true), tp("on_recv_length_tp", "sock", "sock_recv_length", true)];
  return [
    tp("on_set_state", "sock", "inet_sock_set_state", true),
    ...length,
    tp("on_retransmit", "tcp", "tcp_retransmit_skb", false),
    { name: "on_tcp_connect", attach: { kind: "kprobe", func: "tcp_connect" }, required: false },
  ];
}

const CAPTURED_SYSCALLS = ["read", "recvfrom", "readv", "write", "sendto", "writev"] as const;

export const HTTP_PROGRAMS: ProgramSpec[] = CAPTURED_SYSCALLS.flatMap((s) => [
  tp(`enter_${s}`, "syscalls", `sys_enter_${s}`, false),
  tp(`exit_${s}`, "syscalls", `sys_exit_${s}`, false),
]);

export function networkSetSpec(o: NetworkSetOptions): ProgramSetSpec<NetworkEvent> {
  return {
    name: "network",
    object: "network",
    programs: [...lifecyclePrograms(o.kernelBtf ?? existsSync(VMLINUX_BTF)), ...(o.http && o.httpCapture === "syscalls" ? HTTP_PROGRAMS : [])],
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
