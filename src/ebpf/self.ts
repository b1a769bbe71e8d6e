/**
 * The agent's own process id as the kernel's BPF helpers see it (the pid in the outermost pid namespace that
 * /proc shows), so that the agent never traces itself even when it runs in a pid namespace with a view of
 * the host's pids. Falls back to process.pid.
 */
import { readFileSync } from "node:fs";

export function parseNsPid(status: string): number | undefined {
  const line = status.split("\n").find((l) => l.startsWith("NSpid:"));
  const first = line?.slice(6).trim().split(/\s+/)[0];
  const pid = first ? Number(first) : NaN;
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

export function ownKernelPid(readStatus: () => string = () => readFileSync("/proc/self/status", "utf8")): number {
  try {
    return parseNsPid(readStatus()) ?? process.pid;
  } catch {
    return process.pid;
  }
}
