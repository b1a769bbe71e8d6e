/**
 * Typed wrappers over libbpf handles: BpfObject, BpfProgram, BpfMap, BpfLink, and the runtime that opens
 * objects. Each native handle is private; `close()` is idempotent and `[Symbol.dispose]` calls it.
 */
import { JSCallback, ptr, read, toArrayBuffer, type Pointer } from "bun:ffi";
import { close as closeAsync, readFileSync } from "node:fs";
import { LibbpfError, QuietLoadError } from "./errors";
import { lastErrno, nativeLib, releaseFreedNativeMemory, type Native } from "./libbpf";
import { PerfBufferReader } from "./perf-buffer";
import { LibbpfRingBufferReader, RingBufferReader } from "./ring-buffer";
import { closeFd, openCpuClockEvent, withSignalsBlocked } from "./system";
import type { AttachTarget, BpfLinkApi, BpfMapApi, BpfObjectApi, BpfProgramApi, BpfRuntime, EntryCounter, LibbpfInfo, RecordReader } from "./types";

const OPEN_OPTS_SIZE_BYTES = 80;
const UPROBE_OPTS_SIZE_BYTES = 40;
const PROG_INFO_HEAD_BYTES = 16;
const BTF_KIND_DATASEC = 15;
const BTF_TYPE_HEAD_BYTES = 12;
const BTF_SECINFO_BYTES = 12;
const LOG_LINE_BUFFER_BYTES = 256 * 1024;
const DEFAULT_PERF_PAGES = 64;
const MAX_MAP_TYPE_ID = 64;
const LIBBPF_LEVELS = ["warn", "info", "debug"] as const;
const ONLINE_CPUS_PATH = "/sys/devices/system/cpu/online";

/** Whether a batch call's result says the kernel or map type lacks batch operations (EINVAL, EOPNOTSUPP, ENOTSUPP). */
function batchUnsupported(r: number): boolean {
  return r < 0 && (-r === 22 || -r === 95 || -r === 524);
}

/** A NUL-terminated copy of `s`, to pass as `const char *` (keep it referenced during the call). */
function cstr(s: string): Buffer {
  return Buffer.from(s + "\0", "utf8");
}

function str(p: unknown): string {
  return p === null || p === undefined ? "" : String(p);
}

function isNull(p: unknown): boolean {
  return p === null || p === 0 || p === undefined;
}

/** Online CPU ids from /sys/devices/system/cpu/online ("0-3,5"). */
export function onlineCpus(): number[] {
  const text = readFileSync(ONLINE_CPUS_PATH, "utf8").trim();
  const cpus: number[] = [];
  for (const part of text.split(",")) {
    const [a, b] = part.split("-").map(Number);
    if (a === undefined || Number.isNaN(a)) continue;
    for (let c = a; c <= (b ?? a); c++) cpus.push(c);
  }
  return cpus;
}

/** libbpf's log lines: routed to a sink (debug mode) and captured around loads for error reports. */
class LibbpfLog {
  sink: ((level: "warn" | "info" | "debug", line: string) => void) | undefined;
  capture: string[] | undefined;
  readonly #buf = new Uint8Array(LOG_LINE_BUFFER_BYTES);
  readonly #callback: JSCallback;

  constructor(n: Native) {
    const buf = this.#buf;
    const bufPtr = ptr(buf);
    this.#callback = new JSCallback(
      (level: number, fmt: Pointer, args: Pointer) => {
        const len = n.libc.vsnprintf(bufPtr, buf.length, fmt, args);
        if (len <= 0) return 0;
        const line = new TextDecoder().decode(buf.subarray(0, Math.min(len, buf.length - 1))).replace(/\n$/, "");
        const name = LIBBPF_LEVELS[level] ?? "debug";
        if (this.capture && name === "warn") this.capture.push(line);
        this.sink?.(name, line);
        return 0;
      },
      { args: ["i32", "ptr", "ptr"], returns: "i32" },
    );
    n.bpf.libbpf_set_print(this.#callback.ptr!);
  }

  /** Runs `fn` with libbpf's log off (libbpf calls no JavaScript meanwhile). */
  silenced<T>(fn: () => T): T {
    const n = nativeLib();
    n.bpf.libbpf_set_print(null);
    try {
      return fn();
    } finally {
      n.bpf.libbpf_set_print(this.#callback.ptr!);
    }
  }
}

/** Closes `fd` on the runtime's I/O thread pool (node:fs's asynchronous close), not on the calling thread; settles when done. */
function closeOffThread(fd: number): Promise<void> {
  return new Promise((resolve) => closeAsync(fd, () => resolve()));
}

/** Extracts what libbpf said about a failed load: the program it blamed and the verifier log. */
export function parseLoadFailure(lines: string[]): { program: string | undefined; verifierLog: string | undefined; detail: string | undefined } {
  const text = lines.join("\n");
  const log = /-- BEGIN PROG LOAD LOG --\n([\s\S]*?)-- END PROG LOAD LOG --/.exec(text);
  const failed = /prog '([^']+)': failed to load/.exec(text) ?? /prog '([^']+)': BPF program load failed/.exec(text) ?? /prog '([^']+)':/.exec(text);
  const detail = lines.filter((l) => !l.includes("PROG LOAD LOG")).slice(-3).join(" | ").replace(/^libbpf: /, "") || undefined;
  return { program: failed?.[1], verifierLog: log?.[1], detail };
}

export class BpfLink implements BpfLinkApi {
  #handles: Pointer[];
  readonly #closeAside: boolean;

  /**
   * `closeAside`: the kernel's teardown of the link waits (a uprobe's: an RCU grace period, ~100 ms a link on these
   * kernels) and runs on another thread: close() keeps a duplicate of the link's descriptor, destroys the link (no
   * longer the last reference, so at once) and closes the duplicate off the event loop, which meanwhile goes on
   * draining the ring buffers. The probe stops firing when that close completes.
   */
  constructor(handles: Pointer[], closeAside = false) {
    this.#handles = handles;
    this.#closeAside = closeAside;
  }

  close(): void | Promise<void> {
    const n = nativeLib();
    const aside: Array<Promise<void>> = [];
    for (const h of this.#handles) {
      const kept = this.#closeAside ? n.libc.dup(n.bpf.bpf_link__fd(h)) : -1;
      n.bpf.bpf_link__destroy(h);
      if (kept >= 0) aside.push(closeOffThread(kept));
    }
    this.#handles = [];
    if (aside.length > 0) return Promise.all(aside).then(() => {});
  }

  [Symbol.dispose](): void {
    void this.close();
  }
}

export class BpfProgram implements BpfProgramApi {
  readonly #handle: Pointer;
  readonly name: string;
  readonly sectionName: string;
  readonly typeName: string;

  constructor(handle: Pointer) {
    const n = nativeLib();
    this.#handle = handle;
    this.name = str(n.bpf.bpf_program__name(handle));
    this.sectionName = str(n.bpf.bpf_program__section_name(handle));
    this.typeName = str(n.bpf.libbpf_bpf_prog_type_str(n.bpf.bpf_program__type(handle))) || "unknown";
  }

  get autoload(): boolean {
    return nativeLib().bpf.bpf_program__autoload(this.#handle);
  }

  setAutoload(on: boolean): void {
    const r = nativeLib().bpf.bpf_program__set_autoload(this.#handle, on);
    if (r < 0) throw new LibbpfError("bpf_program__set_autoload", -r, { subject: this.name });
  }

  id(): number {
    const n = nativeLib();
    const fd = n.bpf.bpf_program__fd(this.#handle);
    if (fd < 0) return 0;
    const info = new Uint8Array(PROG_INFO_HEAD_BYTES);
    const len = new Uint32Array([PROG_INFO_HEAD_BYTES]);
    const r = n.bpf.bpf_obj_get_info_by_fd(fd, ptr(info), ptr(len));
    if (r < 0) throw new LibbpfError("bpf_obj_get_info_by_fd", -r, { subject: this.name });
    return new DataView(info.buffer).getUint32(4, true);
  }

  attach(target: AttachTarget): BpfLink {
    const n = nativeLib();
    const fail = (op: string, errno: number): never => {
      throw new LibbpfError(op, errno, { subject: this.name });
    };
    const one = (op: string, link: Pointer | null): BpfLink => {
      if (isNull(link)) fail(op, lastErrno());
      return new BpfLink([link as Pointer]);
    };
    switch (target.kind) {
      case "tracepoint": {
        const cat = cstr(target.category);
        const name = cstr(target.name);
        return one("bpf_program__attach_tracepoint", n.bpf.bpf_program__attach_tracepoint(this.#handle, ptr(cat), ptr(name)));
      }
      case "raw_tp": {
        const name = cstr(target.name);
        return one("bpf_program__attach_raw_tracepoint", n.bpf.bpf_program__attach_raw_tracepoint(this.#handle, ptr(name)));
      }
      case "tp_btf":
        return one("bpf_program__attach_trace", n.bpf.bpf_program__attach_trace(this.#handle));
      case "kprobe":
      case "kretprobe": {
        const func = cstr(target.func);
        return one("bpf_program__attach_kprobe", n.bpf.bpf_program__attach_kprobe(this.#handle, target.kind === "kretprobe", ptr(func)));
      }
      case "uprobe":
      case "uretprobe": {
        const binary = cstr(target.binary);
        const func = cstr(target.func);
        const opts = new Uint8Array(UPROBE_OPTS_SIZE_BYTES);
        const dv = new DataView(opts.buffer);
        dv.setBigUint64(0, BigInt(UPROBE_OPTS_SIZE_BYTES), true);
        dv.setUint8(24, target.kind === "uretprobe" ? 1 : 0);
        // func_name NULL: func_offset is the file offset itself.
        if (target.offset === undefined) dv.setBigUint64(32, BigInt(ptr(func)), true);
        const link = n.bpf.bpf_program__attach_uprobe_opts(this.#handle, target.pid ?? -1, ptr(binary), target.offset ?? 0, ptr(opts));
        const errno = isNull(link) ? lastErrno() : 0;
        // libbpf read the binary's symbol tables to find the function, and freed them: their pages go back.
        releaseFreedNativeMemory();
        if (isNull(link)) fail("bpf_program__attach_uprobe_opts", errno);
        return new BpfLink([link as Pointer], true);
      }
      case "perf_event": {
        const links: Pointer[] = [];
        try {
          for (const cpu of onlineCpus()) {
            const pfd = openCpuClockEvent(cpu, target.frequencyHz);
            const link = n.bpf.bpf_program__attach_perf_event(this.#handle, pfd);
            if (isNull(link)) {
              const errno = lastErrno();
              closeFd(pfd);
              fail("bpf_program__attach_perf_event", errno);
            }
            links.push(link as Pointer);
          }
        } catch (e) {
          new BpfLink(links).close();
          throw e;
        }
        return new BpfLink(links);
      }
    }
  }
}

export class BpfMap implements BpfMapApi {
  readonly #handle: Pointer;
  readonly name: string;

  constructor(handle: Pointer) {
    this.#handle = handle;
    this.name = str(nativeLib().bpf.bpf_map__name(handle));
  }

  get typeName(): string {
    const n = nativeLib();
    return str(n.bpf.libbpf_bpf_map_type_str(n.bpf.bpf_map__type(this.#handle))) || "unknown";
  }

  get maxEntries(): number {
    return nativeLib().bpf.bpf_map__max_entries(this.#handle);
  }

  setMaxEntries(count: number): void {
    const r = nativeLib().bpf.bpf_map__set_max_entries(this.#handle, count);
    if (r < 0) throw new LibbpfError("bpf_map__set_max_entries", -r, { subject: this.name });
  }

  setAutocreate(on: boolean): void {
    const r = nativeLib().bpf.bpf_map__set_autocreate(this.#handle, on);
    if (r < 0) throw new LibbpfError("bpf_map__set_autocreate", -r, { subject: this.name });
  }

  #fd(): number {
    const fd = nativeLib().bpf.bpf_map__fd(this.#handle);
    if (fd < 0) throw new LibbpfError("bpf_map__fd", -fd, { subject: this.name, detail: "map not created" });
    return fd;
  }

  countEntries(limit: number): number {
    const counter = this.entryCounter(limit);
    while (!counter.step(Number.MAX_SAFE_INTEGER));
    return counter.count;
  }

  entryCounter(limit: number): EntryCounter {
    const type = this.typeName;
    if (type === "array" || type === "percpu_array") return { step: () => true, count: Math.min(limit, this.maxEntries) };
    // Task storage is kept per thread, not enumerable by key: counted as 0.
    if (type === "ringbuf" || type === "perf_event_array" || type === "user_ringbuf" || type === "task_storage") return { step: () => true, count: 0 };
    const n = nativeLib();
    const fd = this.#fd();
    const keySize = n.bpf.bpf_map__key_size(this.#handle);
    const percpu = type.startsWith("percpu") || type.startsWith("lru_percpu");
    const valueBytes = Math.ceil(n.bpf.bpf_map__value_size(this.#handle) / 8) * 8 * (percpu ? Math.max(1, n.bpf.libbpf_num_possible_cpus()) : 1);
    const name = this.name;
    let key = new Uint8Array(keySize);
    let next = new Uint8Array(keySize);
    const value = new Uint8Array(valueBytes);
    let started = false;
    let done = false;
    let count = 0;
    return {
      get count() {
        return count;
      },
      step(maxKeys: number): boolean {
        if (done) return true;
        let r: number;
        if (!started) {
          r = n.bpf.bpf_map_get_next_key(fd, null, ptr(next));
          started = true;
        } else if (n.bpf.bpf_map_lookup_elem(fd, ptr(key), ptr(value)) < 0) {
          count = 0;
          r = n.bpf.bpf_map_get_next_key(fd, null, ptr(next));
        } else {
          r = n.bpf.bpf_map_get_next_key(fd, ptr(key), ptr(next));
        }
        for (let i = 0; r === 0 && count < limit; i++) {
          count++;
          [key, next] = [next, key];
          if (i + 1 >= maxKeys) return false;
          r = n.bpf.bpf_map_get_next_key(fd, ptr(key), ptr(next));
        }
        if (r < 0 && -r !== 2) throw new LibbpfError("bpf_map_get_next_key", -r, { subject: name });
        done = true;
        return true;
      },
    };
  }

  sumPerCpuU64(key: number): bigint {
    const n = nativeLib();
    const cpus = n.bpf.libbpf_num_possible_cpus();
    if (cpus < 0) throw new LibbpfError("libbpf_num_possible_cpus", -cpus);
    const stride = Math.ceil(n.bpf.bpf_map__value_size(this.#handle) / 8) * 8;
    const values = new Uint8Array(stride * cpus);
    const k = new Uint32Array([key]);
    const r = n.bpf.bpf_map_lookup_elem(this.#fd(), ptr(k), ptr(values));
    if (r < 0) {
      if (-r === 2) return 0n;
      throw new LibbpfError("bpf_map_lookup_elem", -r, { subject: this.name });
    }
    const dv = new DataView(values.buffer);
    let sum = 0n;
    for (let c = 0; c < cpus; c++) sum += dv.getBigUint64(c * stride, true);
    return sum;
  }

  lookupU32Key(key: number): Uint8Array | undefined {
    const n = nativeLib();
    const value = new Uint8Array(this.#valueBytes());
    const k = new Uint32Array([key]);
    const r = n.bpf.bpf_map_lookup_elem(this.#fd(), ptr(k), ptr(value));
    if (r < 0) {
      if (-r === 2) return undefined;
      throw new LibbpfError("bpf_map_lookup_elem", -r, { subject: this.name });
    }
    return value;
  }

  readArrayBatch(count: number): Uint8Array | undefined {
    const values = new Uint8Array(this.#valueBytes() * count);
    if (count === 0) return values;
    const keys = new Uint32Array(count);
    // An array's batch token is the next index (u32); 8 bytes leave room for any map type.
    const token = new Uint8Array(8);
    const n = new Uint32Array([count]);
    const r = nativeLib().bpf.bpf_map_lookup_batch(this.#fd(), null, ptr(token), ptr(keys), ptr(values), ptr(n), null);
    if (batchUnsupported(r)) return undefined;
    // ENOENT: the map's last key was reached, with the count written back.
    if (r < 0 && -r !== 2) throw new LibbpfError("bpf_map_lookup_batch", -r, { subject: this.name });
    if (n[0] !== count) throw new LibbpfError("bpf_map_lookup_batch", 34, { subject: this.name, detail: `read ${n[0]} of ${count} keys` });
    return values;
  }

  writeArrayBatch(count: number, values: Uint8Array): boolean {
    if (count === 0) return true;
    const keys = new Uint32Array(count);
    for (let i = 0; i < count; i++) keys[i] = i;
    const n = new Uint32Array([count]);
    const r = nativeLib().bpf.bpf_map_update_batch(this.#fd(), ptr(keys), ptr(values), ptr(n), null);
    if (batchUnsupported(r)) return false;
    if (r < 0) throw new LibbpfError("bpf_map_update_batch", -r, { subject: this.name });
    return true;
  }

  lookup(key: Uint8Array): Uint8Array | undefined {
    const n = nativeLib();
    const value = new Uint8Array(this.#valueBytes());
    const r = n.bpf.bpf_map_lookup_elem(this.#fd(), ptr(key), ptr(value));
    if (r < 0) {
      if (-r === 2) return undefined;
      throw new LibbpfError("bpf_map_lookup_elem", -r, { subject: this.name });
    }
    return value;
  }

  keys(limit: number): Uint8Array[] {
    const n = nativeLib();
    const fd = this.#fd();
    const keySize = n.bpf.bpf_map__key_size(this.#handle);
    const out: Uint8Array[] = [];
    let next = new Uint8Array(keySize);
    let r = n.bpf.bpf_map_get_next_key(fd, null, ptr(next));
    while (r === 0 && out.length < limit) {
      out.push(next);
      const key = next;
      next = new Uint8Array(keySize);
      r = n.bpf.bpf_map_get_next_key(fd, ptr(key), ptr(next));
    }
    if (r < 0 && -r !== 2) throw new LibbpfError("bpf_map_get_next_key", -r, { subject: this.name });
    return out;
  }

  /** The buffers of takeBatch, reused by every call. */
  #batch: { keys: Uint8Array; values: Uint8Array } | undefined;

  takeBatch(limit: number): { count: number; keys: Uint8Array; values: Uint8Array } | undefined {
    const n = nativeLib();
    const fd = this.#fd();
    const keySize = n.bpf.bpf_map__key_size(this.#handle);
    const valueSize = this.#valueBytes();
    let buffers = this.#batch;
    if (!buffers || buffers.keys.length < keySize * limit || buffers.values.length < valueSize * limit)
      this.#batch = buffers = { keys: new Uint8Array(keySize * limit), values: new Uint8Array(valueSize * limit) };
    const { keys, values } = buffers;
    // Batch tokens of a hash map are bucket indices (u32); 8 bytes leave room for any map type.
    const token = new Uint8Array(8);
    const count = new Uint32Array(1);
    let taken = 0;
    let first = true;
    while (taken < limit) {
      count[0] = limit - taken;
      const r = n.bpf.bpf_map_lookup_and_delete_batch(fd, first ? null : ptr(token), ptr(token), ptr(keys, taken * keySize), ptr(values, taken * valueSize), ptr(count), null);
      first = false;
      if (batchUnsupported(r) && taken === 0) return undefined;
      if (r < 0 && -r !== 2 && -r !== 28) throw new LibbpfError("bpf_map_lookup_and_delete_batch", -r, { subject: this.name });
      // The count written back is what this call took, also with ENOENT (the end) and ENOSPC (a bucket larger than the room left).
      taken += count[0]!;
      if (r < 0) break;
    }
    return { count: taken, keys, values };
  }

  /** Bytes of one value as user space reads it: per-CPU maps give each possible CPU's value, 8-byte aligned. */
  #valueBytes(): number {
    const n = nativeLib();
    const size = n.bpf.bpf_map__value_size(this.#handle);
    if (!this.typeName.startsWith("percpu")) return size;
    const cpus = n.bpf.libbpf_num_possible_cpus();
    if (cpus < 0) throw new LibbpfError("libbpf_num_possible_cpus", -cpus);
    return Math.ceil(size / 8) * 8 * cpus;
  }

  updateU32Key(key: number, value: Uint8Array): void {
    const k = new Uint32Array([key]);
    const r = nativeLib().bpf.bpf_map_update_elem(this.#fd(), ptr(k), ptr(value), 0);
    if (r < 0) throw new LibbpfError("bpf_map_update_elem", -r, { subject: this.name });
  }

  delete(key: Uint8Array): boolean {
    const r = nativeLib().bpf.bpf_map_delete_elem(this.#fd(), ptr(key));
    if (r < 0) {
      if (-r === 2) return false;
      throw new LibbpfError("bpf_map_delete_elem", -r, { subject: this.name });
    }
    return true;
  }

  openReader(options: { perfPageCount?: number; mechanism?: "mmap" | "libbpf-callback" } = {}): RecordReader {
    const type = this.typeName;
    if (type === "ringbuf" && options.mechanism === "libbpf-callback") return new LibbpfRingBufferReader(this.#fd(), this.name);
    if (type === "ringbuf") return new RingBufferReader(this.#fd(), this.maxEntries, this.name);
    if (type === "perf_event_array") return new PerfBufferReader(this.#fd(), options.perfPageCount ?? DEFAULT_PERF_PAGES, this.name);
    throw new LibbpfError("openReader", 22, { subject: this.name, detail: `map type ${type} is neither ringbuf nor perf_event_array` });
  }

  keepFd(): number {
    const n = nativeLib();
    const fd = n.libc.dup(this.#fd());
    if (fd < 0) throw new LibbpfError("dup", lastErrno(), { subject: this.name });
    return fd;
  }

  reuseFd(fd: number): void {
    const r = nativeLib().bpf.bpf_map__reuse_fd(this.#handle, fd);
    if (r < 0) throw new LibbpfError("bpf_map__reuse_fd", -r, { subject: this.name });
  }

  /** The writable initial data of an internal map (.rodata) before load. */
  initialValue(): Uint8Array | undefined {
    const size = new BigUint64Array(1);
    const p = nativeLib().bpf.bpf_map__initial_value(this.#handle, ptr(size));
    if (isNull(p) || size[0] === 0n) return undefined;
    return new Uint8Array(toArrayBuffer(p as Pointer, 0, Number(size[0])));
  }
}

interface ConstantSlot {
  offset: number;
  size: number;
}

/** Writes `entries` into the section bytes `into` at their slots; throws (`op`, `unknown(name)`) on a name without one. */
function writeSlots(slots: Map<string, ConstantSlot>, entries: Array<[string, number | bigint]>, into: Uint8Array, op: string, unknown: (name: string) => string): void {
  const dv = new DataView(into.buffer, into.byteOffset, into.byteLength);
  for (const [name, value] of entries) {
    const slot = slots.get(name);
    if (!slot) throw new LibbpfError(op, 2, { subject: name, detail: unknown(name) });
    const v = BigInt(value);
    switch (slot.size) {
      case 1: dv.setUint8(slot.offset, Number(BigInt.asUintN(8, v))); break;
      case 2: dv.setUint16(slot.offset, Number(BigInt.asUintN(16, v)), true); break;
      case 4: dv.setUint32(slot.offset, Number(BigInt.asUintN(32, v)), true); break;
      case 8: dv.setBigUint64(slot.offset, BigInt.asUintN(64, v), true); break;
      default: throw new LibbpfError(op, 22, { subject: name, detail: `unsupported size ${slot.size}` });
    }
  }
}

export class BpfObject implements BpfObjectApi {
  #handle: Pointer | undefined;
  readonly name: string;
  /**
   * The ELF image libbpf reads from while it opens and loads the object; let go once loaded (libbpf copied what it
   * keeps: instructions, BTF, map data), so that the image (up to ~0.9 MB for network.bpf.o) is not kept resident.
   */
  #bytes: Uint8Array | undefined;
  readonly #log: LibbpfLog;
  readonly #programs: BpfProgram[] = [];
  readonly #maps: BpfMap[] = [];
  /** Set once bpf_object__load succeeded: the maps exist in the kernel. */
  #loaded = false;

  constructor(bytes: Uint8Array, name: string, log: LibbpfLog) {
    const n = nativeLib();
    this.name = name;
    this.#bytes = bytes;
    this.#log = log;
    const objectName = cstr(name);
    const opts = new Uint8Array(OPEN_OPTS_SIZE_BYTES);
    const dv = new DataView(opts.buffer);
    dv.setBigUint64(0, BigInt(OPEN_OPTS_SIZE_BYTES), true);
    dv.setBigUint64(8, BigInt(ptr(objectName)), true);
    const captured: string[] = [];
    log.capture = captured;
    const h = n.bpf.bpf_object__open_mem(ptr(bytes), bytes.byteLength, ptr(opts));
    const errno = isNull(h) ? lastErrno() : 0;
    log.capture = undefined;
    if (isNull(h)) throw new LibbpfError("bpf_object__open_mem", errno, { subject: name, detail: parseLoadFailure(captured).detail });
    this.#handle = h as Pointer;
    for (let p = n.bpf.bpf_object__next_program(this.#handle, null); !isNull(p); p = n.bpf.bpf_object__next_program(this.#handle, p)) {
      this.#programs.push(new BpfProgram(p as Pointer));
    }
    for (let m = n.bpf.bpf_object__next_map(this.#handle, null); !isNull(m); m = n.bpf.bpf_object__next_map(this.#handle, m)) {
      this.#maps.push(new BpfMap(m as Pointer));
    }
  }

  programs(): BpfProgram[] {
    return [...this.#programs];
  }

  maps(): BpfMap[] {
    return [...this.#maps];
  }

  program(name: string): BpfProgram | undefined {
    return this.#programs.find((p) => p.name === name);
  }

  map(name: string): BpfMap | undefined {
    return this.#maps.find((m) => m.name === name);
  }

  /** Name -> place of each global of a data section (".rodata": the `const volatile` ones; ".data": the others set non-zero). */
  #slots(section: string): Map<string, ConstantSlot> {
    const n = nativeLib();
    const slots = new Map<string, ConstantSlot>();
    if (!this.#handle) return slots;
    const btf = n.bpf.bpf_object__btf(this.#handle);
    if (isNull(btf)) return slots;
    const secName = cstr(section);
    const id = n.bpf.btf__find_by_name_kind(btf, ptr(secName), BTF_KIND_DATASEC);
    if (id < 0) return slots;
    const sec = n.bpf.btf__type_by_id(btf, id) as Pointer;
    const vlen = read.u32(sec, 4) & 0xffff;
    for (let i = 0; i < vlen; i++) {
      const at = BTF_TYPE_HEAD_BYTES + i * BTF_SECINFO_BYTES;
      const varType = n.bpf.btf__type_by_id(btf, read.u32(sec, at)) as Pointer;
      const varName = str(n.bpf.btf__name_by_offset(btf, read.u32(varType, 0)));
      slots.set(varName, { offset: read.u32(sec, at + 4), size: read.u32(sec, at + 8) });
    }
    return slots;
  }

  constantNames(): string[] {
    return [...this.#slots(".rodata").keys()];
  }

  setConstants(values: Record<string, number | bigint>): void {
    const entries = Object.entries(values);
    if (entries.length === 0) return;
    const rodata = this.#maps.find((m) => m.name.endsWith(".rodata"))?.initialValue();
    if (!rodata) throw new LibbpfError("bpf_map__initial_value", 2, { subject: `${this.name}.rodata`, detail: "object has no constants" });
    writeSlots(this.#slots(".rodata"), entries, rodata, "setConstants", (name) => `no const volatile '${name}' in ${this.name}`);
  }

  setVariables(values: Record<string, number | bigint>): void {
    const entries = Object.entries(values);
    if (entries.length === 0) return;
    const map = this.#maps.find((m) => m.name.endsWith(".data"));
    if (!map) throw new LibbpfError("setVariables", 2, { subject: `${this.name}.data`, detail: "object has no .data section" });
    const slots = this.#slots(".data");
    const unknown = (name: string) => `no initialised global '${name}' in ${this.name}'s .data`;
    if (!this.#loaded) {
      const initial = map.initialValue();
      if (!initial) throw new LibbpfError("bpf_map__initial_value", 2, { subject: map.name, detail: "no initial value" });
      writeSlots(slots, entries, initial, "setVariables", unknown);
      return;
    }
    // Loaded: the section is the one value of an array map the programs read at each use; rewritten whole.
    const value = map.lookupU32Key(0);
    if (!value) throw new LibbpfError("bpf_map_lookup_elem", 2, { subject: map.name });
    writeSlots(slots, entries, value, "setVariables", unknown);
    map.updateU32Key(0, value);
  }

  load(options: { quiet?: boolean } = {}): void {
    if (!this.#handle) throw new LibbpfError("bpf_object__load", 9, { subject: this.name, detail: "object closed" });
    const handle = this.#handle;
    if (options.quiet && !this.#log.sink) {
      // No JavaScript may run while signals are blocked: a sampling profiler that suspends this thread holds its
      // lock until the signal gets through, and entering JavaScript (libbpf's log callback) takes that lock.
      const r = this.#log.silenced(() => withSignalsBlocked(() => nativeLib().bpf.bpf_object__load(handle)));
      if (r < 0) throw new QuietLoadError(this.name, -r);
      this.#bytes = undefined;
      this.#loaded = true;
      return;
    }
    const captured: string[] = [];
    this.#log.capture = captured;
    const r = nativeLib().bpf.bpf_object__load(handle);
    this.#log.capture = undefined;
    if (r < 0) {
      const f = parseLoadFailure(captured);
      throw new LibbpfError("bpf_object__load", -r, { subject: f.program, verifierLog: f.verifierLog, detail: f.detail });
    }
    this.#bytes = undefined;
    this.#loaded = true;
  }

  close(): void {
    if (!this.#handle) return;
    nativeLib().bpf.bpf_object__close(this.#handle);
    this.#handle = undefined;
    this.#programs.length = 0;
    this.#maps.length = 0;
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/** The runtime over the loaded libbpf: opens objects from memory, probes map types, routes libbpf's log. */
export class LibbpfRuntime implements BpfRuntime {
  readonly info: LibbpfInfo;
  readonly #log: LibbpfLog;
  readonly #probes = new Map<string, boolean>();

  constructor(n: Native) {
    this.info = n.info;
    this.#log = new LibbpfLog(n);
  }

  openObject(bytes: Uint8Array, name: string): BpfObject {
    return new BpfObject(bytes, name, this.#log);
  }

  releaseFreedMemory(): void {
    releaseFreedNativeMemory();
  }

  probeMapType(typeName: string): boolean {
    const known = this.#probes.get(typeName);
    if (known !== undefined) return known;
    const n = nativeLib();
    let result = false;
    for (let t = 1; t < MAX_MAP_TYPE_ID; t++) {
      if (str(n.bpf.libbpf_bpf_map_type_str(t)) !== typeName) continue;
      result = n.bpf.libbpf_probe_bpf_map_type(t, null) === 1;
      break;
    }
    this.#probes.set(typeName, result);
    return result;
  }

  setLogSink(fn: ((level: "warn" | "info" | "debug", line: string) => void) | undefined): void {
    this.#log.sink = fn;
  }
}
