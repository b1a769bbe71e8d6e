/**
 * Checks run once before any program set loads: kernel version, BTF, privileges, bpffs, tracefs, memlock.
 * Each check says what it found; `blocking` ones stop eBPF (reported as the components' failure reason),
 * the others are warnings. Filesystems are mounted and memlock raised when the process may do so.
 */
import { existsSync, readFileSync } from "node:fs";
import { release } from "node:os";
import { kernelAtLeast, MIN_KERNEL, parseKernelRelease, RINGBUF_MIN_KERNEL, VMLINUX_BTF } from "./features";

export const BPFFS_PATH = "/sys/fs/bpf";
export const TRACEFS_PATH = "/sys/kernel/tracing";
const DEBUGFS_TRACING_PATH = "/sys/kernel/debug/tracing";
const MEMCG_ACCOUNTING_KERNEL = "5.11";
const CAP_SYS_ADMIN = 21n;
const CAP_PERFMON = 38n;
const CAP_BPF = 39n;

export interface EnvironmentCheck {
  name: "kernel" | "btf" | "privileges" | "bpffs" | "tracefs" | "memlock";
  ok: boolean;
  /** A failed blocking check means no program set can load. */
  blocking: boolean;
  detail: string;
}

export interface EnvironmentReport {
  checks: EnvironmentCheck[];
  /** Ring buffers are usable (kernel >= 5.8); else sets fall back to perf buffers. */
  ringbuf: boolean;
  /** The reason eBPF cannot run here, or undefined. */
  blocked: string | undefined;
}

/** What the checks touch, injectable for unit tests. */
export interface EnvironmentProbe {
  kernelRelease(): string;
  exists(path: string): boolean;
  /** Text of /proc/self/status. */
  procStatus(): string;
  /** Text of /proc/self/mounts. */
  mounts(): string;
  mount(fstype: string, target: string): void;
  memlock(): { soft: bigint | undefined; hard: bigint | undefined };
  raiseMemlock(): void;
}

export function systemProbe(native: { mountFs(fstype: string, target: string): void; memlockLimit(): { soft: bigint | undefined; hard: bigint | undefined }; raiseMemlock(): void }): EnvironmentProbe {
  return {
    kernelRelease: () => release(),
    exists: existsSync,
    procStatus: () => readFileSync("/proc/self/status", "utf8"),
    mounts: () => readFileSync("/proc/self/mounts", "utf8"),
    mount: (fstype, target) => native.mountFs(fstype, target),
    memlock: () => native.memlockLimit(),
    raiseMemlock: () => native.raiseMemlock(),
  };
}

/** Effective capabilities from /proc/self/status's CapEff line. */
export function effectiveCapabilities(procStatus: string): bigint {
  const m = /^CapEff:\s*([0-9a-f]+)$/m.exec(procStatus);
  return m ? BigInt(`0x${m[1]}`) : 0n;
}

function has(caps: bigint, cap: bigint): boolean {
  return ((caps >> cap) & 1n) === 1n;
}

function mountedAt(mounts: string, target: string, fstype: string): boolean {
  return mounts.split("\n").some((l) => {
    const f = l.split(" ");
    return f[1] === target && f[2] === fstype;
  });
}

function formatBytes(b: bigint | undefined): string {
  return b === undefined ? "unlimited" : `${b} bytes`;
}

export function checkEnvironment(probe: EnvironmentProbe): EnvironmentReport {
  const checks: EnvironmentCheck[] = [];
  const rel = probe.kernelRelease();
  const kernel = parseKernelRelease(rel);
  const kernelOk = kernelAtLeast(MIN_KERNEL, kernel);
  const ringbuf = kernelAtLeast(RINGBUF_MIN_KERNEL, kernel);
  checks.push({
    name: "kernel",
    ok: kernelOk,
    blocking: true,
    detail: !kernelOk
      ? `kernel ${rel} is older than the minimum ${MIN_KERNEL}`
      : ringbuf
        ? `kernel ${rel} (>= ${RINGBUF_MIN_KERNEL}: ring buffers)`
        : `kernel ${rel} (< ${RINGBUF_MIN_KERNEL}: perf buffers instead of ring buffers)`,
  });

  const btf = probe.exists(VMLINUX_BTF);
  checks.push({ name: "btf", ok: btf, blocking: true, detail: btf ? `${VMLINUX_BTF} present` : `${VMLINUX_BTF} missing: CO-RE objects cannot be relocated (kernel needs CONFIG_DEBUG_INFO_BTF)` });

  const caps = effectiveCapabilities(probe.procStatus());
  const admin = has(caps, CAP_SYS_ADMIN);
  const split = has(caps, CAP_BPF) && has(caps, CAP_PERFMON);
  const privileged = admin || split;
  checks.push({
    name: "privileges",
    ok: privileged,
    blocking: true,
    detail: privileged
      ? `CapEff=${caps.toString(16)}: ${[admin && "CAP_SYS_ADMIN", has(caps, CAP_BPF) && "CAP_BPF", has(caps, CAP_PERFMON) && "CAP_PERFMON"].filter(Boolean).join(", ")}`
      : `missing privileges: need CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN (CapEff=${caps.toString(16)}); run privileged or grant the capabilities`,
  });

  const mounts = probe.mounts();
  const ensureMount = (name: "bpffs" | "tracefs", fstype: string, target: string, alsoOk?: string): void => {
    if (mountedAt(mounts, target, fstype)) {
      checks.push({ name, ok: true, blocking: false, detail: `${fstype} mounted at ${target}` });
      return;
    }
    if (alsoOk && probe.exists(alsoOk)) {
      checks.push({ name, ok: true, blocking: false, detail: `${fstype} not at ${target}; using ${alsoOk}` });
      return;
    }
    if (!admin) {
      checks.push({ name, ok: false, blocking: false, detail: `${fstype} not mounted at ${target} and no CAP_SYS_ADMIN to mount it` });
      return;
    }
    try {
      probe.mount(fstype, target);
      checks.push({ name, ok: true, blocking: false, detail: `${fstype} was not mounted; mounted it at ${target}` });
    } catch (e) {
      checks.push({ name, ok: false, blocking: false, detail: `${fstype} not mounted at ${target}; mounting failed: ${(e as Error).message}` });
    }
  };
  ensureMount("bpffs", "bpf", BPFFS_PATH);
  ensureMount("tracefs", "tracefs", TRACEFS_PATH, `${DEBUGFS_TRACING_PATH}/events`);

  if (kernelAtLeast(MEMCG_ACCOUNTING_KERNEL, kernel)) {
    const lim = safeMemlock(probe);
    checks.push({ name: "memlock", ok: true, blocking: false, detail: `kernel >= ${MEMCG_ACCOUNTING_KERNEL} charges BPF memory to the cgroup; RLIMIT_MEMLOCK (${lim}) does not apply` });
  } else {
    try {
      const before = probe.memlock();
      if (before.soft !== undefined) probe.raiseMemlock();
      checks.push({ name: "memlock", ok: true, blocking: false, detail: before.soft === undefined ? "RLIMIT_MEMLOCK unlimited" : `RLIMIT_MEMLOCK raised from ${formatBytes(before.soft)} to unlimited` });
    } catch (e) {
      checks.push({ name: "memlock", ok: false, blocking: true, detail: `RLIMIT_MEMLOCK could not be raised (kernel < ${MEMCG_ACCOUNTING_KERNEL} needs it for BPF maps): ${(e as Error).message}` });
    }
  }

  const blocked = checks.filter((c) => c.blocking && !c.ok).map((c) => c.detail);
  return { checks, ringbuf, blocked: blocked.length ? blocked.join("; ") : undefined };
}

function safeMemlock(probe: EnvironmentProbe): string {
  try {
    return `soft ${formatBytes(probe.memlock().soft)}`;
  } catch (e) {
    return `unknown: ${(e as Error).message}`;
  }
}
