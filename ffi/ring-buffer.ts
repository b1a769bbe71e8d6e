/**
 * BPF ring buffer reader that reads the mmapped ring directly from JavaScript (no callback per record):
 * the consumer page (read-write, holds consumer_pos), and the producer page (producer_pos) followed by the
 * data area mapped twice, so a record never wraps. Each record has an 8-byte header {u32 len, u32 pg_off};
 * `len` carries the BUSY bit (being written: stop here) and the DISCARD bit (skip); records are 8-byte aligned.
 * The read-only pages are read with plain loads: JSC's optimising tiers compile Atomics.load to a locked
 * read-modify-write, which faults on a read-only mapping (measured: SIGSEGV once the reader got hot). On
 * x86-64 plain loads have acquire order; producer_pos is read once per consume() call (no loop-invariant
 * re-reads to be hoisted), and consumer_pos is published with Atomics.store (a full fence) after the
 * records were read. Chosen over libbpf's ring_buffer__consume with a JSCallback by measurement
 * (bench/ringbuf.ts).
 */
import { JSCallback, toArrayBuffer, type Pointer } from "bun:ffi";
import { LibbpfError } from "./errors";
import { lastErrno, nativeLib } from "./libbpf";
import type { RecordHandler, RecordReader } from "./types";

const PAGE_BYTES = 4096;
const PROT_READ = 1;
const PROT_WRITE = 2;
const MAP_SHARED = 1;
const MAP_FAILED = -1;
const HEADER_BYTES = 8;
const BUSY_BIT = 0x8000_0000;
const DISCARD_BIT = 0x4000_0000;
const LEN_MASK = 0x3fff_ffff;
/** Publish consumer_pos at least every this many bytes inside a batch so producers get room early. */
const PUBLISH_EVERY_BYTES = 1 << 20;
const DEFAULT_MAX_RECORDS = 1 << 16;

function mmap(length: number, prot: number, fd: number, offset: number, subject: string): number {
  const addr = nativeLib().libc.mmap(null, length, prot, MAP_SHARED, fd, offset);
  if (Number(addr) === MAP_FAILED) throw new LibbpfError("mmap", lastErrno(), { subject });
  return Number(addr);
}

export class RingBufferReader implements RecordReader {
  readonly kind = "ringbuf" as const;
  readonly lostReported = 0;
  readonly name: string;
  readonly #mask: number;
  readonly #dataBytes: number;
  #consumerAddr = 0;
  #producerAddr = 0;
  #consumerPos: BigUint64Array | undefined;
  #producerPos: BigUint64Array | undefined;
  #headers: Uint32Array | undefined;
  #data: DataView | undefined;

  constructor(mapFd: number, sizeBytes: number, name: string) {
    this.name = name;
    this.#dataBytes = sizeBytes;
    this.#mask = sizeBytes - 1;
    this.#consumerAddr = mmap(PAGE_BYTES, PROT_READ | PROT_WRITE, mapFd, 0, `${name} consumer page`);
    try {
      this.#producerAddr = mmap(PAGE_BYTES + 2 * sizeBytes, PROT_READ, mapFd, PAGE_BYTES, `${name} producer pages`);
    } catch (e) {
      nativeLib().libc.munmap(this.#consumerAddr as Pointer, PAGE_BYTES);
      throw e;
    }
    this.#consumerPos = new BigUint64Array(toArrayBuffer(this.#consumerAddr as Pointer, 0, 8));
    this.#producerPos = new BigUint64Array(toArrayBuffer(this.#producerAddr as Pointer, 0, 8));
    const data = toArrayBuffer(this.#producerAddr as Pointer, PAGE_BYTES, 2 * sizeBytes);
    this.#headers = new Uint32Array(data);
    this.#data = new DataView(data);
  }

  /** Bytes written by producers and not consumed yet. */
  pendingBytes(): number {
    if (!this.#producerPos || !this.#consumerPos) return 0;
    return Number(this.#producerPos[0]! - this.#consumerPos[0]!);
  }

  consume(onRecord: RecordHandler, maxRecords = DEFAULT_MAX_RECORDS): number {
    const consumerPos = this.#consumerPos;
    const producerPos = this.#producerPos;
    const headers = this.#headers;
    const data = this.#data;
    if (!consumerPos || !producerPos || !headers || !data) return 0;
    const mask = this.#mask;
    let cons = Number(consumerPos[0]);
    const prod = Number(producerPos[0]);
    let published = cons;
    let count = 0;
    while (count < maxRecords && cons < prod) {
      const off = cons & mask;
      const hdr = headers[off >>> 2]!;
      if (hdr & BUSY_BIT) break;
      const len = hdr & LEN_MASK;
      if (!(hdr & DISCARD_BIT)) {
        onRecord(data, off + HEADER_BYTES, len);
        count++;
      }
      cons += (len + HEADER_BYTES + 7) & ~7;
      if (cons - published >= PUBLISH_EVERY_BYTES) {
        Atomics.store(consumerPos, 0, BigInt(cons));
        published = cons;
      }
    }
    if (cons !== published) Atomics.store(consumerPos, 0, BigInt(cons));
    return count;
  }

  close(): void {
    if (!this.#consumerPos) return;
    this.#consumerPos = undefined;
    this.#producerPos = undefined;
    this.#headers = undefined;
    this.#data = undefined;
    const libc = nativeLib().libc;
    libc.munmap(this.#producerAddr as Pointer, PAGE_BYTES + 2 * this.#dataBytes);
    libc.munmap(this.#consumerAddr as Pointer, PAGE_BYTES);
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/**
 * The alternative measured against RingBufferReader: libbpf's ring_buffer__consume calling a JSCallback per
 * record. Kept for bench/ringbuf.ts (the agent uses RingBufferReader).
 */
export class LibbpfRingBufferReader implements RecordReader {
  readonly kind = "ringbuf" as const;
  readonly lostReported = 0;
  #rb: Pointer | undefined;
  #callback: JSCallback | undefined;
  #handler: RecordHandler | undefined;

  constructor(mapFd: number, name: string) {
    this.#callback = new JSCallback(
      (_ctx: Pointer, data: Pointer, size: number | bigint) => {
        const length = Number(size);
        this.#handler?.(new DataView(toArrayBuffer(data, 0, length)), 0, length);
        return 0;
      },
      { args: ["ptr", "ptr", "usize"], returns: "i32" },
    );
    const rb = nativeLib().bpf.ring_buffer__new(mapFd, this.#callback.ptr!, null, null);
    if (!rb) {
      const errno = lastErrno();
      this.#callback.close();
      throw new LibbpfError("ring_buffer__new", errno, { subject: name });
    }
    this.#rb = rb;
  }

  consume(onRecord: RecordHandler): number {
    if (!this.#rb) return 0;
    this.#handler = onRecord;
    const r = nativeLib().bpf.ring_buffer__consume(this.#rb);
    this.#handler = undefined;
    if (r < 0) throw new LibbpfError("ring_buffer__consume", -r);
    return r;
  }

  close(): void {
    if (!this.#rb) return;
    nativeLib().bpf.ring_buffer__free(this.#rb);
    this.#rb = undefined;
    this.#callback?.close();
    this.#callback = undefined;
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
