/** The `syscalls` program set as data (ffi/bpf/syscalls.bpf.c): two raw_syscalls tracepoints, no ring buffer. */
import type { ProgramSetSpec } from "../../ebpf/spec";

export interface SyscallSetOptions {
  selfPid: number;
  /** Entries of `syscall_stats` ((process, syscall) pairs). */
  maxEntries: number;
}

export function syscallSetSpec(o: SyscallSetOptions): ProgramSetSpec<never> {
  return {
    name: "syscalls",
    object: "syscalls",
    programs: [
      { name: "sc_enter", attach: { kind: "tracepoint", category: "raw_syscalls", name: "sys_enter" }, required: true },
      { name: "sc_exit", attach: { kind: "tracepoint", category: "raw_syscalls", name: "sys_exit" }, required: true },
    ],
    ringBuffers: [],
    constants: { self_tgid: o.selfPid },
    mapSizes: { syscall_stats: o.maxEntries },
  };
}
