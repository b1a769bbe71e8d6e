/** Syscall names by number for the architectures the agent runs on. */
import { SYSCALLS_ARM64 } from "./names-arm64";
import { SYSCALLS_X86_64 } from "./names-x86_64";

export type SyscallArch = "x64" | "arm64";

const TABLES: Record<SyscallArch, Readonly<Record<number, string>>> = { x64: SYSCALLS_X86_64, arm64: SYSCALLS_ARM64 };

/** Whether the agent has a syscall table for `arch` (a `process.arch` value). */
export function hasSyscallTable(arch: string): arch is SyscallArch {
  return arch === "x64" || arch === "arm64";
}

/** The name of syscall `nr` on `arch`, or `syscall_<nr>` when the table does not know it. */
export function syscallName(arch: SyscallArch, nr: number): string {
  return TABLES[arch][nr] ?? `syscall_${nr}`;
}
