/**
 * Records moved out of a ring buffer before they are decoded, in the order the ring held them: what lets a pump
 * empty its ring at copying speed while its decoder falls behind (a cold JIT, a long collection, a CPU shared with
 * the load). Records sit length-prefixed in chunks of CHUNK_BYTES (a record longer than a chunk gets a chunk of its
 * own); chunks emptied are kept as one spare, the others freed. `bytes` is what the queue holds, records and
 * prefixes, so a caller can bound it.
 */
import type { RecordDecoderFn } from "../../ffi/types";

const CHUNK_BYTES = 1 << 20;
const PREFIX_BYTES = 4;

interface Chunk {
  bytes: Uint8Array;
  view: DataView;
  /** Next record to read. */
  head: number;
  /** End of what was written. */
  tail: number;
}

function newChunk(size: number): Chunk {
  const bytes = new Uint8Array(size);
  return { bytes, view: new DataView(bytes.buffer), head: 0, tail: 0 };
}

export class SpillQueue {
  readonly #chunks: Chunk[] = [];
  #spare: Chunk | undefined;
  #bytes = 0;
  #records = 0;

  /** Bytes held (records and their length prefixes). */
  get bytes(): number {
    return this.#bytes;
  }

  /** Records held. */
  get size(): number {
    return this.#records;
  }

  /** Copies the `length` bytes at `offset` of `view` in as the last record. */
  push(view: DataView, offset: number, length: number): void {
    const need = PREFIX_BYTES + length;
    let tail = this.#chunks[this.#chunks.length - 1];
    if (!tail || tail.bytes.length - tail.tail < need) {
      const spare = this.#spare;
      if (spare && spare.bytes.length >= need) {
        this.#spare = undefined;
        spare.head = spare.tail = 0;
        tail = spare;
      } else tail = newChunk(Math.max(CHUNK_BYTES, need));
      this.#chunks.push(tail);
    }
    tail.view.setUint32(tail.tail, length, true);
    tail.bytes.set(new Uint8Array(view.buffer, view.byteOffset + offset, length), tail.tail + PREFIX_BYTES);
    tail.tail += need;
    this.#bytes += need;
    this.#records++;
  }

  /**
   * Hands at most `max` records, oldest first, to `sink(decode(view, offset, length))`, each valid only during the
   * call; a record whose decode or sink throws is gone and its error goes to `onError`. Returns the records handed.
   */
  take<E>(decode: RecordDecoderFn<E>, sink: (event: E) => void, max: number, onError: (error: unknown) => void): number {
    let n = 0;
    while (n < max && this.#records > 0) {
      const c = this.#chunks[0]!;
      if (c.head >= c.tail) {
        this.#retire();
        continue;
      }
      const length = c.view.getUint32(c.head, true);
      const at = c.head + PREFIX_BYTES;
      c.head = at + length;
      this.#bytes -= PREFIX_BYTES + length;
      this.#records--;
      n++;
      try {
        sink(decode(c.view, at, length));
      } catch (e) {
        onError(e);
      }
    }
    if (this.#records === 0) while (this.#chunks.length > 0) this.#retire();
    return n;
  }

  /** Drops every record held; returns how many there were. */
  clear(): number {
    const n = this.#records;
    this.#chunks.length = 0;
    this.#spare = undefined;
    this.#bytes = 0;
    this.#records = 0;
    return n;
  }

  #retire(): void {
    const c = this.#chunks.shift()!;
    if (!this.#spare && c.bytes.length === CHUNK_BYTES) this.#spare = c;
  }
}
