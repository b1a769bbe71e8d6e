/** Decoders of the profile program's maps (ffi/bpf/profile.bpf.c), pure functions over bytes. */

/** struct profile_key, 32 bytes. */
export const PROFILE_KEY_BYTES = 32;
export const PROFILE_STACK_DEPTH = 127;
/** -EFAULT in a stack id: no stack of that kind (user stack of a kernel thread, kernel stack of a user-mode sample). */
export const NO_STACK = -14;
/** Indices of the profile_errors per-CPU array. */
export const PROFILE_ERRORS = { countsFull: 0, userStack: 1, kernelStack: 2 } as const;

export interface ProfileKey {
  pid: number;
  userStackId: number;
  kernelStackId: number;
  comm: string;
}

const utf8 = new TextDecoder();
/** Thread names seen, by their bytes read as Latin-1 (a name is decoded from UTF-8 once). */
const commNames = new Map<string, string>();
const MAX_COMM_NAMES = 4096;

/** The NUL-terminated comm (16 bytes at most) at `offset`, decoded as UTF-8 once per distinct name. */
export function decodeComm(bytes: Uint8Array, offset: number): string {
  let end = offset;
  const limit = Math.min(bytes.length, offset + 16);
  let ascii = true;
  let latin1 = "";
  for (; end < limit; end++) {
    const c = bytes[end]!;
    if (c === 0) break;
    if (c >= 0x80) ascii = false;
    latin1 += String.fromCharCode(c);
  }
  if (ascii) return latin1;
  let name = commNames.get(latin1);
  if (name === undefined) {
    if (commNames.size >= MAX_COMM_NAMES) commNames.clear();
    commNames.set(latin1, (name = utf8.decode(bytes.subarray(offset, end))));
  }
  return name;
}

export function decodeProfileKey(bytes: Uint8Array): ProfileKey {
  if (bytes.length < PROFILE_KEY_BYTES) throw new RangeError(`profile key of ${bytes.length} bytes, expected ${PROFILE_KEY_BYTES}`);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  const commBytes = bytes.subarray(16, 32);
  const nul = commBytes.indexOf(0);
  return {
    pid: dv.getUint32(0, true),
    userStackId: dv.getInt32(4, true),
    kernelStackId: dv.getInt32(8, true),
    comm: utf8.decode(nul < 0 ? commBytes : commBytes.subarray(0, nul)),
  };
}

/** A u64 count value. */
export function decodeCount(bytes: Uint8Array): number {
  return Number(new DataView(bytes.buffer, bytes.byteOffset, bytes.length).getBigUint64(0, true));
}

/** The addresses of a stack map value, leaf first, up to the first zero. */
export function decodeStack(bytes: Uint8Array): bigint[] {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  const out: bigint[] = [];
  for (let o = 0; o + 8 <= bytes.length; o += 8) {
    const a = dv.getBigUint64(o, true);
    if (a === 0n) break;
    out.push(a);
  }
  return out;
}

/** A user stack's addresses as numbers (user-space addresses are below 2^47, exact in a double), leaf first. */
export function decodeUserStack(bytes: Uint8Array): number[] {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  const out: number[] = [];
  for (let o = 0; o + 8 <= bytes.length; o += 8) {
    const a = dv.getUint32(o + 4, true) * 0x1_0000_0000 + dv.getUint32(o, true);
    if (a === 0) break;
    out.push(a);
  }
  return out;
}
