/** libc calls the eBPF core needs besides libbpf: mount, memlock limit, perf_event_open, close, mmap. */
import { ptr } from "bun:ffi";
import { LibbpfError } from "./errors";
import { lastErrno, nativeLib } from "./libbpf";

const RLIMIT_MEMLOCK = 8;
const RLIM_INFINITY = 0xffff_ffff_ffff_ffffn;
const SYS_PERF_EVENT_OPEN = 298;
const PERF_TYPE_SOFTWARE = 1;
const PERF_COUNT_SW_CPU_CLOCK = 0n;
const PERF_ATTR_SIZE_BYTES = 112;
const PERF_ATTR_FREQ_BIT = 1n << 10n;
const PERF_FLAG_FD_CLOEXEC = 8n;

/** Mounts a pseudo filesystem (`bpf` on /sys/fs/bpf, `tracefs` on /sys/kernel/tracing). Throws LibbpfError (EPERM without CAP_SYS_ADMIN). */
export function mountFs(fstype: string, target: string): void {
  const n = nativeLib();
  const src = Buffer.from(fstype + "\0");
  const dst = Buffer.from(target + "\0");
  const type = Buffer.from(fstype + "\0");
  if (n.libc.mount(ptr(src), ptr(dst), ptr(type), 0n, null) !== 0) {
    throw new LibbpfError("mount", lastErrno(), { subject: `${fstype} on ${target}` });
  }
}

/** The RLIMIT_MEMLOCK soft and hard limits in bytes (undefined = unlimited). */
export function memlockLimit(): { soft: bigint | undefined; hard: bigint | undefined } {
  const n = nativeLib();
  const lim = new BigUint64Array(2);
  if (n.libc.getrlimit(RLIMIT_MEMLOCK, ptr(lim)) !== 0) throw new LibbpfError("getrlimit", lastErrno(), { subject: "RLIMIT_MEMLOCK" });
  const f = (v: bigint | undefined) => (v === RLIM_INFINITY ? undefined : v);
  return { soft: f(lim[0]), hard: f(lim[1]) };
}

/** Raises RLIMIT_MEMLOCK to unlimited (needs CAP_SYS_RESOURCE). */
export function raiseMemlock(): void {
  const n = nativeLib();
  const lim = new BigUint64Array([RLIM_INFINITY, RLIM_INFINITY]);
  if (n.libc.setrlimit(RLIMIT_MEMLOCK, ptr(lim)) !== 0) throw new LibbpfError("setrlimit", lastErrno(), { subject: "RLIMIT_MEMLOCK" });
}

/** Opens a software cpu-clock perf event sampling at `frequencyHz` on `cpu` for every process; returns its fd. */
export function openCpuClockEvent(cpu: number, frequencyHz: number): number {
  const n = nativeLib();
  const attr = new Uint8Array(PERF_ATTR_SIZE_BYTES);
  const dv = new DataView(attr.buffer);
  dv.setUint32(0, PERF_TYPE_SOFTWARE, true);
  dv.setUint32(4, PERF_ATTR_SIZE_BYTES, true);
  dv.setBigUint64(8, PERF_COUNT_SW_CPU_CLOCK, true);
  dv.setBigUint64(16, BigInt(frequencyHz), true);
  dv.setBigUint64(40, PERF_ATTR_FREQ_BIT, true);
  const fd = Number(n.libc.syscall(SYS_PERF_EVENT_OPEN, ptr(attr), -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
  if (fd < 0) throw new LibbpfError("perf_event_open", lastErrno(), { subject: `cpu-clock on cpu ${cpu}` });
  return fd;
}

export function closeFd(fd: number): void {
  nativeLib().libc.close(fd);
}

const SIG_BLOCK = 0;
const SIG_SETMASK = 2;
/** glibc's sigset_t: 1024 bits. */
const SIGSET_BYTES = 128;
/** Every signal; the kernel leaves SIGKILL and SIGSTOP alone and glibc keeps its own internal ones. */
const ALL_SIGNALS = new Uint8Array(SIGSET_BYTES).fill(0xff);

/**
 * Runs `fn` with every signal blocked on the calling thread, then restores the previous mask (a signal that came
 * meanwhile is delivered then, or at once to another thread of the process). For syscalls that give up with
 * EAGAIN or EINTR while a signal is pending, such as BPF_PROG_LOAD's verifier. Throws LibbpfError if the mask
 * cannot be set.
 */
export function withSignalsBlocked<T>(fn: () => T): T {
  const libc = nativeLib().libc;
  const previous = new Uint8Array(SIGSET_BYTES);
  const err = libc.pthread_sigmask(SIG_BLOCK, ptr(ALL_SIGNALS), ptr(previous));
  if (err !== 0) throw new LibbpfError("pthread_sigmask", err, { subject: "block every signal" });
  try {
    return fn();
  } finally {
    libc.pthread_sigmask(SIG_SETMASK, ptr(previous), null);
  }
}
