/** A sorted table of function symbols: address -> name, by binary search. Addresses are plain numbers (< 2^53). */

export interface SymbolEntry {
  address: number;
  /** 0 when unknown (then the symbol extends to the next one). */
  size: number;
  name: string;
}

export class SymbolTable {
  readonly #addresses: Float64Array;
  readonly #sizes: Float64Array;
  readonly #names: string[];

  constructor(entries: SymbolEntry[]) {
    entries.sort((a, b) => a.address - b.address || b.size - a.size);
    this.#addresses = new Float64Array(entries.length);
    this.#sizes = new Float64Array(entries.length);
    this.#names = new Array<string>(entries.length);
    entries.forEach((e, i) => {
      this.#addresses[i] = e.address;
      this.#sizes[i] = e.size;
      this.#names[i] = e.name;
    });
  }

  get size(): number {
    return this.#names.length;
  }

  /** The function containing `address`: the last symbol starting at or before it, if its size covers it (or is unknown). */
  lookup(address: number): string | undefined {
    const a = this.#addresses;
    let lo = 0;
    let hi = a.length - 1;
    if (hi < 0 || address < a[0]!) return undefined;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (a[mid]! <= address) lo = mid;
      else hi = mid - 1;
    }
    // Among symbols at the same address prefer the first (largest size after sorting).
    let i = lo;
    while (i > 0 && a[i - 1] === a[lo]) i--;
    const size = this.#sizes[i]!;
    if (size > 0 && address >= a[i]! + size) return undefined;
    return this.#names[i];
  }
}
