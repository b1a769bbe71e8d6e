/** Decoder of `struct process_event` (ffi/bpf/process.bpf.c); offsets mirror the C struct. Pure. */

export const PROCESS_EVENT_LAYOUT = {
  timestampNs: 0, // __u64
  cgroupId: 8, // __u64
  kind: 16, // __u32: 1 exec, 2 exit, 3 fork
  pid: 20, // __u32 (tgid)
  tid: 24, // __u32
  ppid: 28, // __u32
  uid: 32, // __u32
  exitCode: 36, // __s32
  comm: 40, // char[16]
  filename: 56, // char[256]
  size: 312,
} as const;

const COMM_BYTES = 16;
const FILENAME_BYTES = 256;
const KINDS = { 1: "exec", 2: "exit", 3: "fork" } as const;

export interface ProcessEvent {
  /** exec: a process started a program; exit: a process ended; fork: a new process (not a thread), `pid` the child and `ppid` its parent. */
  kind: "exec" | "exit" | "fork";
  timestampNs: bigint;
  cgroupId: bigint;
  pid: number;
  tid: number;
  ppid: number;
  uid: number;
  /** Wait status as the kernel keeps it (exit status << 8 | signal). */
  exitCode: number;
  comm: string;
  /** The path given to execve (exec only; "" on exit). */
  filename: string;
}

const utf8 = new TextDecoder();

/** A NUL-terminated string in a fixed-size field. */
export function cString(view: DataView, offset: number, maxBytes: number): string {
  const bytes = new Uint8Array(view.buffer, view.byteOffset + offset, maxBytes);
  const end = bytes.indexOf(0);
  return utf8.decode(end === -1 ? bytes : bytes.subarray(0, end));
}

export function decodeProcessEvent(view: DataView, offset: number, length: number): ProcessEvent {
  const L = PROCESS_EVENT_LAYOUT;
  if (length < L.size) throw new RangeError(`process event of ${length} bytes, expected ${L.size}`);
  const kindValue = view.getUint32(offset + L.kind, true);
  const kind = KINDS[kindValue as keyof typeof KINDS];
  if (!kind) throw new RangeError(`unknown process event kind ${kindValue}`);
  return {
    kind,
    timestampNs: view.getBigUint64(offset + L.timestampNs, true),
    cgroupId: view.getBigUint64(offset + L.cgroupId, true),
    pid: view.getUint32(offset + L.pid, true),
    tid: view.getUint32(offset + L.tid, true),
    ppid: view.getUint32(offset + L.ppid, true),
    uid: view.getUint32(offset + L.uid, true),
    exitCode: view.getInt32(offset + L.exitCode, true),
    comm: cString(view, offset + L.comm, COMM_BYTES),
    filename: kind === "exec" ? cString(view, offset + L.filename, FILENAME_BYTES) : "",
  };
}
