/**
 * The `syscalls` program set as data (ffi/bpf/syscalls.bpf.c): two raw_syscalls tracepoints, no ring buffer;
 * two sched tracepoints keep the maps free of ended threads and processes (optional: without them user space
 * still deletes the entries of ended processes every interval).
 */
import type { ProgramSetSpec } from "../../ebpf/spec";
import { SC_FOLD_BELOW_CALLS } from "./decoders";

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
      { name: "sc_task_exit", attach: { kind: "tracepoint", category: "sched", name: "sched_process_exit" }, required: false },
      { name: "sc_exec", attach: { kind: "tracepoint", category: "sched", name: "sched_process_exec" }, required: false },
    ],
    ringBuffers: [],
    constants: { self_tgid: o.selfPid, fold_below_calls: BigInt(SC_FOLD_BELOW_CALLS) },
    mapSizes: { syscall_stats: o.maxEntries, proc_nrs: o.maxEntries },
  };
}
