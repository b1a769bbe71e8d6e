/**
 * A sorted table of function symbols: address -> name, by binary search. Addresses are plain numbers (< 2^53).
 * Large tables (ELF symbol tables, kallsyms) keep their names as bytes of the file's string table and decode a
 * name when it is looked up: a few typed arrays instead of one string object per symbol (hundreds of thousands
 * of strings made every collection and heap walk slower).
 */

export interface SymbolEntry {
  address: number;
  /** 0 when unknown (then the symbol extends to the next one). */
  size: number;
  name: string;
}

/** Symbols whose names are byte ranges of `text` (UTF-8), in any order; `count` entries of each array are used. */
export interface PackedSymbols {
  count: number;
  addresses: Float64Array;
  /** Absent: no sizes known (each symbol extends to the next). */
  sizes?: Float64Array;
  text: Uint8Array;
  nameStarts: Uint32Array;
  nameEnds: Uint32Array;
  /** A small number per symbol (e.g. the kernel module), returned by tagAt. */
  tags?: Uint16Array;
}

const utf8 = new TextDecoder();

export class SymbolTable {
  readonly #addresses: Float64Array;
  /** undefined: no sizes known (0 for every symbol). */
  readonly #sizes: Float64Array | undefined;
  readonly #names: string[] | undefined;
  readonly #text: Uint8Array | undefined;
  readonly #starts: Uint32Array | undefined;
  readonly #ends: Uint32Array | undefined;
  readonly #tags: Uint16Array | undefined;

  constructor(symbols: SymbolEntry[] | PackedSymbols) {
    if (Array.isArray(symbols)) {
      const entries = symbols;
      entries.sort((a, b) => a.address - b.address || b.size - a.size);
      this.#tags = undefined;
      this.#addresses = new Float64Array(entries.length);
      const sizes = new Float64Array(entries.length);
      this.#sizes = sizes;
      this.#names = new Array<string>(entries.length);
      entries.forEach((e, i) => {
        this.#addresses[i] = e.address;
        sizes[i] = e.size;
        this.#names![i] = e.name;
      });
      return;
    }
    const p = symbols;
    const order = new Uint32Array(p.count);
    for (let i = 0; i < p.count; i++) order[i] = i;
    const sizes = p.sizes;
    order.sort(sizes ? (a, b) => p.addresses[a]! - p.addresses[b]! || sizes[b]! - sizes[a]! : (a, b) => p.addresses[a]! - p.addresses[b]!);
    this.#addresses = new Float64Array(p.count);
    this.#sizes = sizes ? new Float64Array(p.count) : undefined;
    this.#starts = new Uint32Array(p.count);
    this.#ends = new Uint32Array(p.count);
    const tags = p.tags ? new Uint16Array(p.count) : undefined;
    for (let i = 0; i < p.count; i++) {
      const j = order[i]!;
      this.#addresses[i] = p.addresses[j]!;
      if (this.#sizes) this.#sizes[i] = sizes![j]!;
      this.#starts[i] = p.nameStarts[j]!;
      this.#ends[i] = p.nameEnds[j]!;
      if (tags) tags[i] = p.tags![j]!;
    }
    this.#tags = tags;
    this.#text = p.text;
  }

  get size(): number {
    return this.#addresses.length;
  }

  /** The index of the function containing `address`, or -1. */
  indexOf(address: number): number {
    const a = this.#addresses;
    let lo = 0;
    let hi = a.length - 1;
    if (hi < 0 || address < a[0]!) return -1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (a[mid]! <= address) lo = mid;
      else hi = mid - 1;
    }
    // Among symbols at the same address prefer the first (largest size after sorting).
    let i = lo;
    while (i > 0 && a[i - 1] === a[lo]) i--;
    const size = this.#sizes?.[i] ?? 0;
    if (size > 0 && address >= a[i]! + size) return -1;
    return i;
  }

  /** The name of the symbol at an index of indexOf. */
  nameAt(i: number): string {
    if (this.#names) return this.#names[i]!;
    return utf8.decode(this.#text!.subarray(this.#starts![i]!, this.#ends![i]!));
  }

  /** The address of the symbol at an index (0 <= i < size). */
  addressAt(i: number): number {
    return this.#addresses[i]!;
  }

  /** The size in bytes of the symbol at an index (0 when unknown). */
  sizeAt(i: number): number {
    return this.#sizes?.[i] ?? 0;
  }

  /** The tag of the symbol at an index of indexOf (0 when the table has none). */
  tagAt(i: number): number {
    return this.#tags?.[i] ?? 0;
  }

  /** The function containing `address`: the last symbol starting at or before it, if its size covers it (or is unknown). */
  lookup(address: number): string | undefined {
    const i = this.indexOf(address);
    return i < 0 ? undefined : this.nameAt(i);
  }
}
