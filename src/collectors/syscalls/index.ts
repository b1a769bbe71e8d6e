/**
 * Syscall tracing: per-process syscall counts, errors and latency histograms aggregated in kernel maps by the
 * `syscalls` eBPF program set (ffi/bpf/syscalls.bpf.c) and exported periodically as bounded metrics (top N
 * processes plus `other`), with syscall names for x86_64 and arm64. Component `ebpf/syscalls`.
 */
import type { AgentContext } from "../context";
import type { Component } from "../../lifecycle/component";
import { SyscallCollector } from "./component";

export { SyscallCollector } from "./component";
export { syscallSetSpec } from "./spec";

/** Its factory (its entry in ../registry.ts): the `ebpf/syscalls` component (it reports `disabled` when turned off, the default). */
export function createSyscallCollectors(ctx: AgentContext): Component[] {
  return [new SyscallCollector(ctx, ctx.ebpf)];
}
