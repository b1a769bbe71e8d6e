/**
 * BPF ring buffer reader that reads the mmapped ring directly from JavaScript (no callback per record):
 * the consumer page (read-write, holds consumer_pos), and the producer page (producer_pos) followed by the
 * data area, mapped once. The kernel offers the data pages twice in a row, so that a consumer mapping both (as
 * libbpf does) reads a record that wraps past the end in one piece; mapping both doubled the ring's resident set
 * (every page is present from the mmap on, and counted once per mapping). Here a record that wraps (rare: records
 * are small against the ring) is copied into a scratch buffer and decoded from there. Each record has an 8-byte
 * header {u32 len, u32 pg_off};
 * `len` carries the BUSY bit (bit 31: being written, stop here) and the DISCARD bit (skip); records are 8-byte aligned.
 * The read-only pages are read with plain loads: JSC's optimising tiers compile Atomics.load to a locked
 * read-modify-write, which faults on a read-only mapping (measured: SIGSEGV once the reader got hot). On
 * x86-64 plain loads have acquire order; producer_pos is read once per walk (no loop-invariant re-reads to be
 * hoisted), and consumer_pos is published with Atomics.store (a full fence) after the records were read, once
 * per walk (and every PUBLISH_EVERY_BYTES inside a long one).
 * The hot loop (RingConsumer.consumeDecoded) loads one Int32Array word per record and calls
 * `sink(decode(view, offset, length))` with the reader's one DataView: no closure, view or object of its own
 * per record, and no try per record (a throwing record ends the walk past itself, the error is reported, and a
 * new walk resumes). Chosen over libbpf's ring_buffer__consume with a JSCallback by measurement
 * (bench/ringbuf.ts).
 */
import { JSCallback, toArrayBuffer, type Pointer } from "bun:ffi";
import { LibbpfError } from "./errors";
import { lastErrno, nativeLib } from "./libbpf";
import type { RecordDecoderFn, RecordHandler, RecordReader } from "./types";

const PAGE_BYTES = 4096;
const PROT_READ = 1;
const PROT_WRITE = 2;
const MAP_SHARED = 1;
const MAP_FAILED = -1;
const HEADER_BYTES = 8;
const DISCARD_BIT = 0x4000_0000;
const LEN_MASK = 0x3fff_ffff;
/** Publish consumer_pos at least every this many bytes inside a walk so producers get room early. */
const PUBLISH_EVERY_BYTES = 1 << 20;
const DEFAULT_MAX_RECORDS = 1 << 16;

function mmap(length: number, prot: number, fd: number, offset: number, subject: string): number {
  const addr = nativeLib().libc.mmap(null, length, prot, MAP_SHARED, fd, offset);
  if (Number(addr) === MAP_FAILED) throw new LibbpfError("mmap", lastErrno(), { subject });
  return Number(addr);
}

const IGNORE = (): void => {};
const RETHROW = (error: unknown): never => {
  throw error;
};

/**
 * The consumer side of a ring buffer over memory laid out as the kernel maps it: `consumerPos` (u64, ours to
 * advance), `producerPos` (u64, the kernel's), and `data`: the data area (`sizeBytes`, a power of two; only its
 * first `sizeBytes` are read). Pure JavaScript over typed arrays (unit tests give it plain buffers);
 * RingBufferReader gives it the mmapped pages.
 */
export class RingConsumer {
  readonly #mask: number;
  #consumerPos: BigUint64Array | undefined;
  #producerPos: BigUint64Array | undefined;
  /** Record headers as int32 words: the BUSY bit is the sign bit. */
  #headers: Int32Array | undefined;
  #view: DataView | undefined;
  #bytes: Uint8Array | undefined;
  /** Where a record that wraps past the end of the data area is put together (grown to the largest seen). */
  #scratch = new Uint8Array(0);
  #scratchView = new DataView(this.#scratch.buffer);
  /** Records handed out by the last walk (read after a walk ended by a throw). */
  #walked = 0;

  constructor(consumerPos: BigUint64Array, producerPos: BigUint64Array, data: ArrayBuffer, sizeBytes: number) {
    this.#mask = sizeBytes - 1;
    this.#consumerPos = consumerPos;
    this.#producerPos = producerPos;
    this.#headers = new Int32Array(data, 0, sizeBytes >>> 2);
    this.#view = new DataView(data, 0, sizeBytes);
    this.#bytes = new Uint8Array(data, 0, sizeBytes);
  }

  /** The `len` bytes at `at` that run past the end of the data area, copied into the scratch buffer, as a view. */
  #joined(at: number, len: number): DataView {
    const bytes = this.#bytes!;
    if (this.#scratch.length < len) {
      this.#scratch = new Uint8Array(Math.max(len, 2 * this.#scratch.length));
      this.#scratchView = new DataView(this.#scratch.buffer);
    }
    const head = bytes.length - at;
    this.#scratch.set(bytes.subarray(at), 0);
    this.#scratch.set(bytes.subarray(0, len - head), head);
    return this.#scratchView;
  }

  /** Bytes written by producers and not consumed yet. */
  pendingBytes(): number {
    if (!this.#producerPos || !this.#consumerPos) return 0;
    return Number(this.#producerPos[0]! - this.#consumerPos[0]!);
  }

  consume(onRecord: RecordHandler, maxRecords = DEFAULT_MAX_RECORDS): number {
    return this.consumeDecoded(onRecord, IGNORE, maxRecords, RETHROW);
  }

  consumeDecoded<E>(decode: RecordDecoderFn<E>, sink: (event: E) => void, maxRecords: number, onError: (error: unknown) => void): number {
    let handed = 0;
    for (;;) {
      try {
        return handed + this.#walk(decode, sink, maxRecords - handed);
      } catch (e) {
        handed += this.#walked;
        onError(e);
        if (handed >= maxRecords) return handed;
      }
    }
  }

  /**
   * Reads records from consumer_pos up to producer_pos (or a busy one, or `max`); publishes the new position even
   * when a record threw. Positions are u64 byte counts; the loop works on the bytes walked from the start, at most
   * the ring's size, so its arithmetic stays in int32 however far the positions have grown.
   */
  #walk<E>(decode: RecordDecoderFn<E>, sink: (event: E) => void, max: number): number {
    const consumerPos = this.#consumerPos;
    const producerPos = this.#producerPos;
    const headers = this.#headers;
    const view = this.#view;
    this.#walked = 0;
    if (!consumerPos || !producerPos || !headers || !view) return 0;
    const mask = this.#mask;
    const cons = Number(consumerPos[0]);
    const pending = Math.min(Number(producerPos[0]) - cons, mask + 1);
    const start = cons % (mask + 1);
    let walked = 0;
    let published = 0;
    let count = 0;
    try {
      while (count < max && walked < pending) {
        const off = (start + walked) & mask;
        const hdr = headers[off >>> 2]!;
        if (hdr < 0) break; // BUSY_BIT, the sign bit
        const len = hdr & LEN_MASK;
        walked += (len + HEADER_BYTES + 7) & ~7;
        if ((hdr & DISCARD_BIT) === 0) {
          count++;
          // A header never wraps (8-byte aligned, the size a power of two); the record after it may.
          const at = (off + HEADER_BYTES) & mask;
          if (at + len <= mask + 1) sink(decode(view, at, len));
          else sink(decode(this.#joined(at, len), 0, len));
        }
        if (walked - published >= PUBLISH_EVERY_BYTES) {
          Atomics.store(consumerPos, 0, BigInt(cons + walked));
          published = walked;
        }
      }
    } finally {
      this.#walked = count;
      if (walked !== published) Atomics.store(consumerPos, 0, BigInt(cons + walked));
    }
    return count;
  }

  /** Forgets the memory (reads nothing afterwards); true the first time. */
  protected detach(): boolean {
    if (!this.#consumerPos) return false;
    this.#consumerPos = undefined;
    this.#producerPos = undefined;
    this.#headers = undefined;
    this.#view = undefined;
    this.#bytes = undefined;
    return true;
  }
}

export class RingBufferReader extends RingConsumer implements RecordReader {
  readonly kind = "ringbuf" as const;
  readonly lostReported = 0;
  readonly name: string;
  readonly pollFd: number;
  readonly #dataBytes: number;
  readonly #consumerAddr: number;
  readonly #producerAddr: number;

  constructor(mapFd: number, sizeBytes: number, name: string) {
    const consumerAddr = mmap(PAGE_BYTES, PROT_READ | PROT_WRITE, mapFd, 0, `${name} consumer page`);
    let producerAddr: number;
    try {
      producerAddr = mmap(PAGE_BYTES + sizeBytes, PROT_READ, mapFd, PAGE_BYTES, `${name} producer pages`);
    } catch (e) {
      nativeLib().libc.munmap(consumerAddr as Pointer, PAGE_BYTES);
      throw e;
    }
    super(
      new BigUint64Array(toArrayBuffer(consumerAddr as Pointer, 0, 8)),
      new BigUint64Array(toArrayBuffer(producerAddr as Pointer, 0, 8)),
      toArrayBuffer(producerAddr as Pointer, PAGE_BYTES, sizeBytes),
      sizeBytes,
    );
    this.name = name;
    this.pollFd = mapFd;
    this.#dataBytes = sizeBytes;
    this.#consumerAddr = consumerAddr;
    this.#producerAddr = producerAddr;
  }

  close(): void {
    if (!this.detach()) return;
    const libc = nativeLib().libc;
    libc.munmap(this.#producerAddr as Pointer, PAGE_BYTES + this.#dataBytes);
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

  /** `maxRecords` is not applied (libbpf reads what is there); errors are caught per record inside the callback. */
  consumeDecoded<E>(decode: RecordDecoderFn<E>, sink: (event: E) => void, _maxRecords: number, onError: (error: unknown) => void): number {
    return this.consume((view, offset, length) => {
      try {
        sink(decode(view, offset, length));
      } catch (e) {
        onError(e);
      }
    });
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
