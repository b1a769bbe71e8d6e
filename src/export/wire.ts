/**
 * A small protobuf writer over one growable buffer, for the hot path (encoding every span, point and record
 * once at submit). Nested messages reserve one length byte and are shifted in the rare case they reach 128
 * bytes or more, so nothing is encoded twice and no per-field objects are allocated.
 */

const INITIAL_BUFFER_BYTES = 64 * 1024;
/** Up to this many bytes are copied one by one (a native copy costs more for ids and keys). */
const SHORT_COPY_BYTES = 32;
/** A string of at most this many UTF-16 units needs at most 126 UTF-8 bytes: its length fits one byte. */
const SHORT_STRING_UNITS = 42;

export const WIRE = { VARINT: 0, FIXED64: 1, LEN: 2, FIXED32: 5 } as const;

const encoder = new TextEncoder();

/**
 * A buffer for writing: not zero-filled (only bytes written are ever read; a large zeroed Uint8Array cost 15 to
 * 30 µs per request body here), over memory of its own (allocUnsafeSlow never hands out a slice of Node's shared
 * pool), and a plain Uint8Array (a Buffer's slice() would be a view, not a copy).
 */
export function allocate(bytes: number): Uint8Array {
  const b = Buffer.allocUnsafeSlow(bytes);
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

export class ProtoWriter {
  buf: Uint8Array;
  view: DataView;
  pos = 0;

  constructor(initialBytes = INITIAL_BUFFER_BYTES) {
    this.buf = allocate(initialBytes);
    this.view = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
  }

  /**
   * Writes on into `buf` from `pos` (an arena holding earlier items); a write that does not fit moves the writer
   * to a new, larger buffer holding a copy of `buf`, so `buf` is never written past its end.
   */
  attach(buf: Uint8Array, pos: number): void {
    if (this.buf !== buf) {
      this.buf = buf;
      this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    }
    this.pos = pos;
  }

  /** Empties the writer (keeps its buffer). */
  reset(): void {
    this.pos = 0;
  }

  /** A copy of what was written since `from`. */
  copy(from = 0): Uint8Array {
    return this.buf.slice(from, this.pos);
  }

  ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.pos + n) size *= 2;
    const next = allocate(size);
    next.set(this.buf.subarray(0, this.pos));
    this.buf = next;
    this.view = new DataView(next.buffer, next.byteOffset, next.byteLength);
  }

  /** An unsigned varint of a non-negative safe integer. */
  varint(v: number): void {
    this.ensure(10);
    const b = this.buf;
    let p = this.pos;
    if (v < 0x80) {
      b[p++] = v;
    } else {
      while (v > 0x7fffffff) {
        b[p++] = (v % 128) | 0x80;
        v = Math.floor(v / 128);
      }
      while (v > 0x7f) {
        b[p++] = (v & 0x7f) | 0x80;
        v >>>= 7;
      }
      b[p++] = v;
    }
    this.pos = p;
  }

  /** A signed int64 varint (negative values take 10 bytes, two's complement). */
  int64(v: number): void {
    if (v >= 0) return this.varint(v);
    let u = BigInt.asUintN(64, BigInt(Math.trunc(v)));
    this.ensure(10);
    while (u > 0x7fn) {
      this.buf[this.pos++] = Number(u & 0x7fn) | 0x80;
      u >>= 7n;
    }
    this.buf[this.pos++] = Number(u);
  }

  /** An unsigned varint of a 64-bit value. */
  varintBig(v: bigint): void {
    if (v <= 0x7fffffffn) return this.varint(Number(v));
    this.ensure(10);
    let u = BigInt.asUintN(64, v);
    while (u > 0x7fn) {
      this.buf[this.pos++] = Number(u & 0x7fn) | 0x80;
      u >>= 7n;
    }
    this.buf[this.pos++] = Number(u);
  }

  tag(field: number, wire: number): void {
    this.varint((field << 3) | wire);
  }

  fixed64(v: bigint): void {
    this.ensure(8);
    this.view.setBigUint64(this.pos, v, true);
    this.pos += 8;
  }

  /** fixed64 of a non-negative safe integer (counts). */
  fixed64n(v: number): void {
    this.ensure(8);
    this.view.setUint32(this.pos, v >>> 0, true);
    this.view.setUint32(this.pos + 4, Math.floor(v / 4294967296), true);
    this.pos += 8;
  }

  sfixed64(v: number): void {
    this.ensure(8);
    this.view.setBigInt64(this.pos, BigInt(Math.trunc(v)), true);
    this.pos += 8;
  }

  fixed32(v: number): void {
    this.ensure(4);
    this.view.setUint32(this.pos, v >>> 0, true);
    this.pos += 4;
  }

  double(v: number): void {
    this.ensure(8);
    this.view.setFloat64(this.pos, v, true);
    this.pos += 8;
  }

  /** Raw bytes (an already encoded message body, after its tag and length). */
  raw(bytes: Uint8Array): void {
    if (bytes.length <= SHORT_COPY_BYTES) return this.short(bytes);
    this.ensure(bytes.length);
    this.buf.set(bytes, this.pos);
    this.pos += bytes.length;
  }

  /** Raw bytes, copied one by one (cheaper than a native copy for a few bytes). */
  short(bytes: Uint8Array): void {
    const n = bytes.length;
    this.ensure(n);
    const b = this.buf;
    let p = this.pos;
    for (let i = 0; i < n; i++) b[p++] = bytes[i]!;
    this.pos = p;
  }

  /** A length-delimited bytes field. */
  bytesField(field: number, bytes: Uint8Array): void {
    this.tag(field, WIRE.LEN);
    this.varint(bytes.length);
    this.raw(bytes);
  }

  /** A varint field (tag and value). */
  varintField(field: number, v: number): void {
    this.tag(field, WIRE.VARINT);
    this.varint(v);
  }

  /** A fixed64 field of a bigint (times in nanoseconds). */
  fixed64Field(field: number, v: bigint): void {
    this.tag(field, WIRE.FIXED64);
    this.fixed64(v);
  }

  /** An sfixed64 field of an integer number. */
  sfixed64Field(field: number, v: number): void {
    this.tag(field, WIRE.FIXED64);
    this.sfixed64(v);
  }

  /** A fixed32 field. */
  fixed32Field(field: number, v: number): void {
    this.tag(field, WIRE.FIXED32);
    this.fixed32(v);
  }

  /** A double field. */
  doubleField(field: number, v: number): void {
    this.tag(field, WIRE.FIXED64);
    this.double(v);
  }

  /** A length-delimited string field. */
  stringField(field: number, s: string): void {
    this.tag(field, WIRE.LEN);
    this.stringBody(s);
  }

  /** Length and UTF-8 bytes of a string. */
  stringBody(s: string): void {
    const n = s.length;
    if (n <= SHORT_STRING_UNITS) {
      this.ensure(1 + n * 3);
      const b = this.buf;
      const start = this.pos;
      let p = start + 1;
      let i = 0;
      for (; i < n; i++) {
        const c = s.charCodeAt(i);
        if (c >= 0x80) break;
        b[p++] = c;
      }
      if (i < n) p = start + 1 + encoder.encodeInto(s, b.subarray(start + 1)).written;
      b[start] = p - start - 1;
      this.pos = p;
      return;
    }
    const at = this.begin();
    this.ensure(n * 3);
    this.pos += encoder.encodeInto(s, this.buf.subarray(this.pos)).written;
    this.end(at);
  }

  /** Starts a length-delimited field: writes the tag and reserves one length byte; returns the mark for end(). */
  open(field: number): number {
    this.tag(field, WIRE.LEN);
    return this.begin();
  }

  begin(): number {
    this.ensure(1);
    return this.pos++;
  }

  /** Ends a length-delimited field begun at `mark`: writes its length, shifting the body when it needs more bytes. */
  end(mark: number): void {
    const len = this.pos - mark - 1;
    if (len < 0x80) {
      this.buf[mark] = len;
      return;
    }
    let extra = 0;
    for (let v = len >>> 7; v > 0; v >>>= 7) extra++;
    this.ensure(extra);
    this.buf.copyWithin(mark + 1 + extra, mark + 1, this.pos);
    let p = mark;
    let v = len;
    while (v > 0x7f) {
      this.buf[p++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    this.buf[p] = v;
    this.pos += extra;
  }
}
