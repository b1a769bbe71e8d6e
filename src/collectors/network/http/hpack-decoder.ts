/**
 * HPACK (RFC 7541) header block decoding for the HTTP/2 parser, one decoder per connection direction. The
 * dynamic table is kept exact (entry sizes are decoded octets, as the encoder counts them), but strings are built
 * only for the header fields the agent reads (KEPT_NAMES): other names and values go through the table as their
 * decoded lengths, which a Huffman string yields without building it. A block of up to REPEAT_BLOCK_BYTES that
 * changed nothing in the table is remembered: the same bytes next (a client's requests and a server's responses
 * are mostly such blocks once their fields are in the table) give its fields again without decoding.
 *
 * Huffman decoding is a nibble-at-a-time state machine built once from hpack.js's code table (RFC 7541
 * Appendix B): 256 states (the inner nodes of the code tree) by 16 nibbles, each transition giving the next
 * state, at most one symbol (codes are 5 bits or longer) and whether the bits since the last symbol may end the
 * string (at most 7 of them, all ones). EOS in a string, padding longer than 7 bits or padding with a 0 bit are
 * errors (RFC 7541 section 5.2). The static table is hpack.js's (RFC 7541 Appendix A).
 *
 * hpack.js's own decoder walks the code tree a bit at a time and builds every string, and its table shifts an
 * array per eviction: ~1.2 µs of the ~3.6 µs the agent spent per request in the HTTP/2 parser under h2load
 * (bench/h2-overhead.ts, JavaScript CPU profile of the agent), the rest going to per-frame Buffers and objects.
 */
import hpack from "hpack.js";

/** Header fields kept from a block, by their index in KEPT_NAMES. */
export const KEPT_NAMES = [":method", ":path", ":authority", ":scheme", ":status", "content-type", "grpc-status", "traceparent", "grpc-timeout"] as const;
export const F_METHOD = 0;
export const F_PATH = 1;
export const F_AUTHORITY = 2;
export const F_SCHEME = 3;
export const F_STATUS = 4;
export const F_CONTENT_TYPE = 5;
export const F_GRPC_STATUS = 6;
export const F_TRACEPARENT = 7;
export const F_GRPC_TIMEOUT = 8;
const NOT_KEPT = -1;
/** A partial decoder's entry whose name is unknown (added by a literal naming an entry older than its first block). */
const UNKNOWN_NAME = -2;
const MAX_KEPT_NAME_BYTES = Math.max(...KEPT_NAMES.map((n) => n.length));
const KEPT_BYTES = KEPT_NAMES.map((n) => Uint8Array.from(n, (c) => c.charCodeAt(0)));

/** An HPACK error: the block (and the direction's table with it) cannot be decoded. */
export class HpackError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "HpackError";
  }
}

/* ---- Huffman ---- */

const FLAG_SYMBOL = 0x100;
const FLAG_ACCEPT = 0x200;
const FLAG_FAIL = 0x400;
/** transitions[state * 16 + nibble] = next state << 16 | flags | symbol. */
const transitions = new Uint32Array(256 * 16);

function buildHuffman(): void {
  const codes = hpack.huffman.encode;
  /* The code tree: inner nodes 0..255 (0 the root), children as node ids or ~symbol for leaves. */
  const children: Array<[number, number]> = [[0, 0]];
  const depth = [0];
  const allOnes = [true];
  const UNSET = 0;
  for (let sym = 0; sym < codes.length; sym++) {
    const [bits, code] = codes[sym]!;
    let node = 0;
    for (let i = bits - 1; i >= 0; i--) {
      const bit = (code >>> i) & 1;
      if (i === 0) {
        children[node]![bit] = ~sym;
        break;
      }
      let next = children[node]![bit]!;
      if (next === UNSET) {
        next = children.length;
        children.push([0, 0]);
        depth.push(depth[node]! + 1);
        allOnes.push(allOnes[node]! && bit === 1);
        children[node]![bit] = next;
      }
      node = next;
    }
  }
  if (children.length !== 256) throw new Error(`Huffman code tree has ${children.length} inner nodes, expected 256`);
  for (let state = 0; state < 256; state++) {
    for (let nibble = 0; nibble < 16; nibble++) {
      let node = state;
      let symbol = -1;
      let fail = false;
      for (let i = 3; i >= 0; i--) {
        const next = children[node]![(nibble >>> i) & 1]!;
        if (next < 0) {
          const sym = ~next;
          if (sym === 256) {
            fail = true;
            break;
          }
          symbol = sym;
          node = 0;
        } else node = next;
      }
      let t = (node << 16) | (symbol >= 0 ? FLAG_SYMBOL | symbol : 0);
      if (fail) t = FLAG_FAIL;
      else if (allOnes[node]! && depth[node]! <= 7) t |= FLAG_ACCEPT;
      transitions[state * 16 + nibble] = t;
    }
  }
}
buildHuffman();

/**
 * Decodes the Huffman string `src[from, to)` into `out` at 0 (when given; it must hold 8/5 of the input), or only
 * counts its octets. Returns the decoded length; throws HpackError on EOS or bad padding.
 */
export function huffmanDecode(src: Uint8Array, from: number, to: number, out: Uint8Array | undefined): number {
  let state = 0;
  let accept = true;
  let n = 0;
  for (let i = from; i < to; i++) {
    const b = src[i]!;
    let t = transitions[(state << 4) | (b >>> 4)]!;
    if (t & FLAG_FAIL) throw new HpackError("Huffman: EOS in a string");
    if (t & FLAG_SYMBOL) {
      if (out) out[n] = t & 0xff;
      n++;
    }
    t = transitions[((t >>> 16) << 4) | (b & 15)]!;
    if (t & FLAG_FAIL) throw new HpackError("Huffman: EOS in a string");
    if (t & FLAG_SYMBOL) {
      if (out) out[n] = t & 0xff;
      n++;
    }
    state = t >>> 16;
    accept = (t & FLAG_ACCEPT) !== 0;
  }
  if (!accept) throw new HpackError("Huffman: padding longer than 7 bits or not all ones");
  return n;
}

/* ---- tables ---- */

interface StaticEntry {
  name: string;
  value: string;
  nameSize: number;
}
const STATIC = hpack["static-table"].table;
const STATIC_COUNT = STATIC.length;
const keptIndex = (name: string): number => (KEPT_NAMES as readonly string[]).indexOf(name);
const STATIC_KEPT = Int8Array.from(STATIC, (e) => keptIndex(e.name));
const STATIC_NAME_SIZE = Int32Array.from(STATIC, (e) => e.nameSize);
const STATIC_VALUE = STATIC.map((e) => e.value);

/** A dynamic table entry: which kept name (or NOT_KEPT, UNKNOWN_NAME), the value when kept, octet sizes. */
interface Entry {
  kept: number;
  value: string | undefined;
  nameSize: number;
  size: number;
}

/** Each entry's overhead in the table size (RFC 7541 section 4.1). */
const ENTRY_OVERHEAD = 32;
const MAX_INTEGER = 2 ** 31 - 1;
/** Encoded string literals of kept fields up to this size are remembered (one per field and direction). */
const MAX_REMEMBERED_LITERAL = 256;

/**
 * A header block up to this size that left the dynamic table as it was is remembered (one per direction): the same
 * bytes next give the same fields without decoding (a client's requests and a server's responses repeat themselves
 * once their fields are in the table).
 */
const REPEAT_BLOCK_BYTES = 64;

/** Scratch for decoded strings: a header block is at most `maxBlockBytes`, its Huffman strings at most 8/5 of that. */
let scratch = new Uint8Array(1024);

/** The fields of one decoded header block (strings for KEPT_NAMES; undefined when absent). Reused per block. */
export type HeaderFields = Array<string | undefined>;

export class HpackDecoder {
  /** Dynamic table, a ring: the newest entry at #head - 1. */
  #ring: Array<Entry | undefined> = new Array(8);
  #head = 0;
  #count = 0;
  /** Sum of the entries' sizes. */
  size = 0;
  /** Per kept field: its last string literal as encoded (length prefix included), its value and decoded size. */
  readonly #lastEncoded: Array<Uint8Array | undefined> = new Array(KEPT_NAMES.length);
  readonly #lastValues: Array<string | undefined> = new Array(KEPT_NAMES.length);
  readonly #lastSizes = new Int32Array(KEPT_NAMES.length);
  /** The table's size limit now (set by the encoder's size updates, up to `limit`). */
  maxSize: number;
  /** Changes of the dynamic table (entries added or evicted, size updates). */
  #changes = 0;
  /** The last block decoded when it changed nothing in the table (#lastBlockLen -1: none), and its fields. */
  readonly #lastBlock = new Uint8Array(REPEAT_BLOCK_BYTES);
  #lastBlockLen = -1;
  readonly #lastFields: HeaderFields = new Array(KEPT_NAMES.length);
  #lastUnknown = 0;
  /** Decoding from the middle of a connection (setPartial): entries added before the first block seen are unknown. */
  #partial = false;
  /**
   * Fields of the last block decoded whose name the table did not know (partial decoders only): an index past the
   * entries seen, an entry added before decoding began. Which fields they were is unknown (:path among them, maybe).
   */
  unknownFields = 0;

  constructor(
    initialSize: number,
    /** The largest size update accepted. */
    readonly limit: number,
  ) {
    this.maxSize = initialSize;
  }

  /**
   * From here on the decoder starts in the middle of a connection, its table's earlier entries unknown. Indexes are
   * counted from the newest entry, so the entries added from here on keep their true indexes whatever came before;
   * an index past them names an entry older than the first block decoded, whose field is counted in unknownFields
   * and left out, not an error. Keeping an entry the encoder has evicted never misnames a field (the encoder no
   * longer refers to it), evicting one it still has only makes its field unknown: so the table takes the largest
   * size accepted until a size update says the encoder's, and an entry whose name is unknown counts no name octets.
   * Before the first block.
   */
  setPartial(): void {
    this.#partial = true;
    this.maxSize = this.limit;
  }

  /** Entries in the dynamic table. */
  get length(): number {
    return this.#count;
  }

  /**
   * The value of kept field `kept` at `pos`: its string literal as it was encoded the last time (a client sends
   * the same :path, never indexed, again and again) gives the last value without decoding it again.
   */
  #keptValue(kept: number): string {
    if (pos >= end) throw new HpackError("string runs past the block");
    const at = pos;
    const last = this.#lastEncoded[kept];
    if (last !== undefined) {
      const n = last.length;
      let same = at + n <= end;
      for (let k = 0; same && k < n; k++) same = src[at + k] === last[k];
      if (same) {
        pos = at + n;
        lastSize = this.#lastSizes[kept]!;
        return this.#lastValues[kept]!;
      }
    }
    const size = readString(true);
    const value = latin1(scratch, size);
    if (pos - at <= MAX_REMEMBERED_LITERAL) {
      this.#lastEncoded[kept] = src.slice(at, pos);
      this.#lastValues[kept] = value;
      this.#lastSizes[kept] = size;
    }
    lastSize = size;
    return value;
  }

  /** The dynamic table's entry sizes, newest first (for tests). */
  entrySizes(): number[] {
    const out: number[] = [];
    for (let k = 1; k <= this.#count; k++) out.push(this.#entry(k).size);
    return out;
  }

  #entry(index: number): Entry {
    /* index is 1-based after the static table: 1 the newest. */
    const ring = this.#ring;
    return ring[(this.#head - index + ring.length) & (ring.length - 1)]!;
  }

  #evict(): void {
    const ring = this.#ring;
    while (this.size > this.maxSize && this.#count > 0) {
      const i = (this.#head - this.#count + ring.length) & (ring.length - 1);
      this.size -= ring[i]!.size;
      ring[i] = undefined;
      this.#count--;
    }
  }

  #add(kept: number, value: string | undefined, nameSize: number, valueSize: number): void {
    this.#changes++;
    const size = nameSize + valueSize + ENTRY_OVERHEAD;
    this.size += size;
    this.#evict();
    if (size > this.maxSize) {
      /* An entry larger than the table empties it and is not added (RFC 7541 section 4.4). */
      this.size -= size;
      return;
    }
    let ring = this.#ring;
    if (this.#count === ring.length) {
      const grown = new Array<Entry | undefined>(ring.length * 2);
      for (let k = 0; k < this.#count; k++) grown[k] = ring[(this.#head - this.#count + k + ring.length) & (ring.length - 1)];
      this.#ring = ring = grown;
      this.#head = this.#count;
    }
    ring[this.#head] = { kept, value, nameSize, size };
    this.#head = (this.#head + 1) & (ring.length - 1);
    this.#count++;
  }

  #updateSize(size: number): void {
    if (size > this.limit) throw new HpackError(`table size update to ${size} over the bound of ${this.limit}`);
    this.maxSize = size;
    this.#changes++;
    this.#evict();
  }

  /**
   * Decodes the header block `b[from, to)` into `out` (indexed by F_*; cleared first), updating the dynamic table.
   * Throws HpackError when the block does not decode (the table is then unusable).
   */
  decode(b: Uint8Array, from: number, to: number, out: HeaderFields): void {
    const n = to - from;
    if (n === this.#lastBlockLen && sameBytes(b, from, this.#lastBlock, n)) {
      /* The block decoded last, which changed nothing: the same fields, the table as it is. */
      for (let k = 0; k < KEPT_NAMES.length; k++) out[k] = this.#lastFields[k];
      this.unknownFields = this.#lastUnknown;
      return;
    }
    this.#lastBlockLen = -1;
    const changes = this.#changes;
    this.#decode(b, from, to, out);
    if (n <= REPEAT_BLOCK_BYTES && this.#changes === changes) {
      for (let k = 0; k < n; k++) this.#lastBlock[k] = b[from + k]!;
      for (let k = 0; k < KEPT_NAMES.length; k++) this.#lastFields[k] = out[k];
      this.#lastUnknown = this.unknownFields;
      this.#lastBlockLen = n;
    }
  }

  #decode(b: Uint8Array, from: number, to: number, out: HeaderFields): void {
    for (let k = 0; k < KEPT_NAMES.length; k++) out[k] = undefined;
    this.unknownFields = 0;
    if (scratch.length < ((to - from) * 8) / 5 + 8) scratch = new Uint8Array(Math.ceil(((to - from) * 8) / 5) + 8);
    src = b;
    pos = from;
    end = to;
    while (pos < end) {
      const first = b[pos]!;
      if (first & 0x80) {
        /* Indexed field. */
        const index = readInt(7);
        if (index === 0) throw new HpackError("indexed field 0");
        if (index <= STATIC_COUNT) {
          const kept = STATIC_KEPT[index - 1]!;
          if (kept !== NOT_KEPT) out[kept] = STATIC_VALUE[index - 1];
        } else if (index - STATIC_COUNT <= this.#count) {
          const e = this.#entry(index - STATIC_COUNT);
          if (e.kept >= 0) out[e.kept] = e.value;
          else if (e.kept === UNKNOWN_NAME) this.unknownFields++;
        } else {
          if (!this.#partial) throw new HpackError(`index ${index} past the table`);
          this.unknownFields++;
        }
        continue;
      }
      if ((first & 0xe0) === 0x20) {
        /* Dynamic table size update. */
        this.#updateSize(readInt(5));
        continue;
      }
      /* Literal: with incremental indexing (01), without (0000) or never indexed (0001). */
      const incremental = (first & 0xc0) === 0x40;
      const index = readInt(incremental ? 6 : 4);
      let kept: number;
      let nameSize: number;
      if (index === 0) {
        nameSize = readString(true);
        kept = nameSize <= MAX_KEPT_NAME_BYTES ? keptOfBytes(scratch, nameSize) : NOT_KEPT;
      } else if (index <= STATIC_COUNT) {
        kept = STATIC_KEPT[index - 1]!;
        nameSize = STATIC_NAME_SIZE[index - 1]!;
      } else if (index - STATIC_COUNT <= this.#count) {
        const e = this.#entry(index - STATIC_COUNT);
        kept = e.kept;
        nameSize = e.nameSize;
        if (kept === UNKNOWN_NAME) this.unknownFields++;
      } else {
        if (!this.#partial) throw new HpackError(`index ${index} past the table`);
        this.unknownFields++;
        kept = UNKNOWN_NAME;
        nameSize = 0;
      }
      let value: string | undefined;
      let valueSize: number;
      if (kept < 0) valueSize = readString(false);
      else {
        value = this.#keptValue(kept);
        valueSize = lastSize;
        out[kept] = value;
      }
      if (incremental) this.#add(kept, value, nameSize, valueSize);
    }
    src = EMPTY;
  }
}

const EMPTY = new Uint8Array(0);

/* The block being decoded (decoding is synchronous: one block at a time in the process). */
let src: Uint8Array = EMPTY;
let pos = 0;
let end = 0;
/** The decoded size of the value #keptValue returned last. */
let lastSize = 0;

/** An integer with a `prefixBits` prefix at `pos` (RFC 7541 section 5.1). */
function readInt(prefixBits: number): number {
  const mask = (1 << prefixBits) - 1;
  let v = src[pos++]! & mask;
  if (v !== mask) return v;
  let shift = 0;
  for (;;) {
    if (pos >= end) throw new HpackError("integer runs past the block");
    const c = src[pos++]!;
    v += (c & 0x7f) * 2 ** shift;
    if (v > MAX_INTEGER) throw new HpackError("integer out of range");
    if ((c & 0x80) === 0) return v;
    shift += 7;
  }
}

/** A string at `pos` (RFC 7541 section 5.2): its decoded length, its octets at scratch[0] when `want`. */
function readString(want: boolean): number {
  if (pos >= end) throw new HpackError("string runs past the block");
  const huffman = (src[pos]! & 0x80) !== 0;
  const len = readInt(7);
  if (len > end - pos) throw new HpackError("string runs past the block");
  const start = pos;
  pos += len;
  if (huffman) return huffmanDecode(src, start, start + len, want ? scratch : undefined);
  if (want) for (let k = 0; k < len; k++) scratch[k] = src[start + k]!;
  return len;
}

function sameBytes(a: Uint8Array, from: number, b: Uint8Array, n: number): boolean {
  for (let k = 0; k < n; k++) if (a[from + k] !== b[k]) return false;
  return true;
}

function keptOfBytes(s: Uint8Array, n: number): number {
  for (let k = 0; k < KEPT_BYTES.length; k++) {
    const name = KEPT_BYTES[k]!;
    if (name.length !== n) continue;
    let same = true;
    for (let j = 0; j < n; j++) {
      if (s[j] !== name[j]) {
        same = false;
        break;
      }
    }
    if (same) return k;
  }
  return NOT_KEPT;
}

/** Octets as Latin-1 text (one character each), as hpack.js's stringify gives them. */
function latin1(s: Uint8Array, n: number): string {
  if (n > 64) return Buffer.from(s.buffer, s.byteOffset, n).toString("latin1");
  let out = "";
  for (let k = 0; k < n; k++) out += String.fromCharCode(s[k]!);
  return out;
}
