/** Typed errors of the native layer: every failing libbpf or libc call becomes a `LibbpfError`. */

/** Linux errno values by name (x86_64), the ones libbpf and the syscalls used here return. */
const ERRNO_NAMES: Record<number, string> = {
  1: "EPERM", 2: "ENOENT", 3: "ESRCH", 4: "EINTR", 5: "EIO", 7: "E2BIG", 8: "ENOEXEC", 9: "EBADF",
  11: "EAGAIN", 12: "ENOMEM", 13: "EACCES", 14: "EFAULT", 16: "EBUSY", 17: "EEXIST", 19: "ENODEV",
  20: "ENOTDIR", 22: "EINVAL", 24: "EMFILE", 28: "ENOSPC", 34: "ERANGE", 38: "ENOSYS", 61: "ENODATA",
  71: "EPROTO", 75: "EOVERFLOW", 95: "EOPNOTSUPP", 110: "ETIMEDOUT", 524: "ENOTSUPP", 4003: "LIBBPF_ERRNO__FORMAT",
  4001: "LIBBPF_ERRNO__LIBELF", 4007: "LIBBPF_ERRNO__VERIFY", 4009: "LIBBPF_ERRNO__PROG2BIG", 4010: "LIBBPF_ERRNO__KVER",
};

/** Short texts for the errno values an operator meets most. */
const ERRNO_TEXT: Record<string, string> = {
  EPERM: "operation not permitted",
  ENOENT: "no such file or directory (the kernel lacks this attach point or feature)",
  EACCES: "permission denied (verifier rejected the program)",
  EINVAL: "invalid argument",
  ENOMEM: "out of memory",
  E2BIG: "argument list too long",
  EBUSY: "device or resource busy",
  ENOSYS: "function not implemented",
  EOPNOTSUPP: "operation not supported",
  ENOTSUPP: "operation not supported by the kernel",
  ESRCH: "no such process (symbol not found)",
  ENODEV: "no such device",
};

export function errnoName(errno: number): string {
  return ERRNO_NAMES[Math.abs(errno)] ?? `E${Math.abs(errno)}`;
}

/** A libbpf or libc call that failed: which call, the errno and its name; the verifier log travels as data. */
export class LibbpfError extends Error {
  override readonly name = "LibbpfError";
  /** The failing call, e.g. `bpf_object__load`, `bpf_program__attach_kprobe`. */
  readonly op: string;
  /** Positive errno. */
  readonly errno: number;
  /** Symbolic name of errno, e.g. `ENOENT`. */
  readonly code: string;
  /** The kernel verifier's log for a failed program load, when there is one. */
  readonly verifierLog: string | undefined;
  /** The program or map the call was about, when there is one. */
  readonly subject: string | undefined;

  constructor(op: string, errno: number, options: { subject?: string; verifierLog?: string; detail?: string } = {}) {
    const e = Math.abs(errno);
    const code = errnoName(e);
    const text = ERRNO_TEXT[code] ?? "error";
    super(`${op}${options.subject ? ` (${options.subject})` : ""} failed: ${code}: ${text}${options.detail ? `: ${options.detail}` : ""}`);
    this.op = op;
    this.errno = e;
    this.code = code;
    this.verifierLog = options.verifierLog;
    this.subject = options.subject;
  }
}

/**
 * A quiet bpf_object__load (libbpf's log off, signals blocked) failed: it cannot say which program failed or why,
 * so the caller loads a fresh copy of the object verbosely to learn that.
 */
export class QuietLoadError extends LibbpfError {
  constructor(object: string, errno: number) {
    super("bpf_object__load", errno, { subject: object, detail: "quiet load: libbpf's log was off" });
  }
}

/** libbpf could not be found or loaded at all (no usable system copy, embedded copy unusable). */
export class LibbpfUnavailableError extends Error {
  override readonly name = "LibbpfUnavailableError";
  constructor(message: string, readonly attempts: string[]) {
    super(`${message}: ${attempts.join("; ")}`);
  }
}
