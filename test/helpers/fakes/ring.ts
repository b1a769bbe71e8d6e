/** A synthetic BPF ring buffer for unit tests: what the kernel's producer side does, in JS, over plain buffers. */
import type { RecordReader } from "../../../ffi/types";
import { RingConsumer } from "../../../ffi/ring-buffer";

const BUSY = 0x8000_0000;
const DISCARD = 0x4000_0000;

export class FakeRing {
  readonly consumerPos = new BigUint64Array(1);
  readonly producerPos = new BigUint64Array(1);
  readonly data: ArrayBuffer;
  readonly bytes: Uint8Array;
  readonly consumer: RingReaderOverBuffers;
  #reserved: bigint;

  constructor(readonly size: number, startPos = 0n) {
    this.data = new ArrayBuffer(size);
    this.bytes = new Uint8Array(this.data);
    this.consumerPos[0] = startPos;
    this.producerPos[0] = startPos;
    this.#reserved = startPos;
    this.consumer = new RingReaderOverBuffers(this.consumerPos, this.producerPos, this.data, size);
  }

  /** Writes at ring position `pos` into the data area (mapped once: what runs past the end continues at its start). */
  #write(pos: bigint, src: Uint8Array): void {
    const first = Number(pos % BigInt(this.size));
    for (let i = 0; i < src.length; i++) this.bytes[(first + i) % this.size] = src[i]!;
  }

  #header(pos: bigint, word: number): void {
    const h = new Uint8Array(8);
    new DataView(h.buffer).setUint32(0, word >>> 0, true);
    this.#write(pos, h);
  }

  /** Reserves and writes a record; returns its position (left BUSY when `commit` is false). */
  push(payload: Uint8Array, opts: { commit?: boolean; discard?: boolean } = {}): bigint {
    const pos = this.#reserved;
    this.#write(pos + 8n, payload);
    this.#reserved += BigInt((payload.length + 8 + 7) & ~7);
    this.producerPos[0] = this.#reserved;
    this.#header(pos, payload.length | (opts.commit === false ? BUSY : 0) | (opts.discard ? DISCARD : 0));
    return pos;
  }

  commit(pos: bigint, length: number): void {
    this.#header(pos, length);
  }
}

/** RingConsumer as a RecordReader (what RingBufferReader is, without the mmap). */
export class RingReaderOverBuffers extends RingConsumer implements RecordReader {
  readonly kind = "ringbuf" as const;
  readonly lostReported = 0;
  close(): void {
    this.detach();
  }
  [Symbol.dispose](): void {
    this.close();
  }
}

/** A record numbered `n`: u32 n, then bytes derived from n (so a torn read shows). */
export function record(n: number, length = 16): Uint8Array {
  const r = new Uint8Array(length);
  const v = new DataView(r.buffer);
  v.setUint32(0, n, true);
  for (let i = 4; i < length; i++) r[i] = (n + i) & 0xff;
  return r;
}

