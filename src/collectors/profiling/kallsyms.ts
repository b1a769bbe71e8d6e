/** Kernel symbols from /proc/kallsyms (text symbols only), for kernel stack frames. */
import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { SymbolTable } from "./symbol-table";

const NL = 0x0a;
const SPACE = 0x20;
const TAB = 0x09;
const TWO_32 = 0x1_0000_0000;
const utf8 = new TextDecoder();
/** Lines parsed between two yields of the event loop by KernelSymbols.load (~5 ms of work here). */
const LOAD_SLICE_LINES = 16_384;

/** The parse of kallsyms text, resumable: step() parses some lines at a time, table() ends it. */
class KallsymsParser {
  readonly text: Uint8Array;
  readonly #hi: Uint32Array;
  readonly #lo: Uint32Array;
  readonly #nameStarts: Uint32Array;
  readonly #nameEnds: Uint32Array;
  readonly #moduleOf: Uint16Array;
  readonly #modules = new Map<string, number>();
  /** Module names; a symbol's tag is 0 for the kernel image, else 1 + an index here. */
  readonly moduleNames: string[] = [];
  #n = 0;
  #p = 0;
  #minHi = 0xffff_ffff;
  #minLo = 0xffff_ffff;

  constructor(text: Uint8Array) {
    this.text = text;
    let lines = 1;
    for (let at = text.indexOf(NL); at >= 0; at = text.indexOf(NL, at + 1)) lines++;
    this.#hi = new Uint32Array(lines);
    this.#lo = new Uint32Array(lines);
    this.#nameStarts = new Uint32Array(lines);
    this.#nameEnds = new Uint32Array(lines);
    this.#moduleOf = new Uint16Array(lines);
  }

  /** Parses up to `maxLines` more lines; false once the text is done. */
  step(maxLines: number): boolean {
    const text = this.text;
    let p = this.#p;
    let n = this.#n;
    for (let k = 0; k < maxLines && p < text.length; k++) {
      let end = text.indexOf(NL, p);
      if (end < 0) end = text.length;
      const line = p;
      p = end + 1;
      // "<hex address> <type> <name>[\t[module]]"
      let i = line;
      let h = 0;
      let l = 0;
      let digits = 0;
      for (; i < end && text[i] !== SPACE; i++, digits++) {
        const v = hexValue(text[i]!);
        if (v < 0) break;
        // Two 32-bit halves: the high half takes the low half's top nibble.
        h = ((h << 4) | (l >>> 28)) >>> 0;
        l = ((l << 4) | v) >>> 0;
      }
      if (i + 3 > end || text[i] !== SPACE || digits === 0 || digits > 16) continue;
      const type = text[i + 1]! | 0x20;
      if (type !== 0x74 /* t */ && type !== 0x77 /* w */) continue;
      if (h === 0 && l === 0) continue;
      const nameStart = i + 3;
      let nameEnd = nameStart;
      while (nameEnd < end && text[nameEnd] !== TAB) nameEnd++;
      let module = 0;
      if (nameEnd < end) {
        let m = utf8.decode(text.subarray(nameEnd + 1, end));
        if (m.startsWith("[") && m.endsWith("]")) m = m.slice(1, -1);
        module = this.#modules.get(m) ?? 0;
        if (!module) {
          this.moduleNames.push(m);
          this.#modules.set(m, (module = this.moduleNames.length));
        }
      }
      this.#hi[n] = h;
      this.#lo[n] = l;
      this.#nameStarts[n] = nameStart;
      this.#nameEnds[n] = nameEnd;
      this.#moduleOf[n] = module;
      if (h < this.#minHi || (h === this.#minHi && l < this.#minLo)) {
        this.#minHi = h;
        this.#minLo = l;
      }
      n++;
    }
    this.#p = p;
    this.#n = n;
    return p < text.length;
  }

  /** The table of what was parsed, with addresses as offsets from `base` (the lowest address). */
  table(): { base: bigint; table: SymbolTable } {
    const n = this.#n;
    const [minHi, minLo, hi, lo, nameStarts, nameEnds] = [this.#minHi, this.#minLo, this.#hi, this.#lo, this.#nameStarts, this.#nameEnds];
    const base = n > 0 ? (BigInt(minHi) << 32n) | BigInt(minLo) : 0n;
    const addresses = new Float64Array(n);
    for (let k = 0; k < n; k++) addresses[k] = (hi[k]! - minHi) * TWO_32 + (lo[k]! - minLo);
    // The names alone, back to back (the file's addresses, types and module columns are not kept: ~45% of it).
    let nameBytes = 0;
    for (let k = 0; k < n; k++) nameBytes += nameEnds[k]! - nameStarts[k]!;
    const names = new Uint8Array(nameBytes);
    for (let k = 0, at = 0; k < n; k++) {
      names.set(this.text.subarray(nameStarts[k]!, nameEnds[k]!), at);
      nameEnds[k] = at + nameEnds[k]! - nameStarts[k]!;
      nameStarts[k] = at;
      at = nameEnds[k]!;
    }
    // Kernel symbols have no sizes: each extends to the next.
    return { base, table: new SymbolTable({ count: n, addresses, text: names, nameStarts, nameEnds, tags: this.#moduleOf }) };
  }
}

export class KernelSymbols {
  /** Kernel addresses exceed 2^53: the table holds offsets from `#base`. */
  readonly #base: bigint;
  readonly #table: SymbolTable;
  readonly #moduleNames: string[];

  /** Parses kallsyms (text or bytes), kept as bytes: names are decoded when looked up. Addresses of 0 (kptr_restrict hides them) leave the table empty. */
  constructor(source: string | Uint8Array | KallsymsParser) {
    let parser: KallsymsParser;
    if (source instanceof KallsymsParser) parser = source;
    else {
      parser = new KallsymsParser(typeof source === "string" ? new TextEncoder().encode(source) : source);
      parser.step(Number.POSITIVE_INFINITY);
    }
    const { base, table } = parser.table();
    this.#base = base;
    this.#table = table;
    this.#moduleNames = parser.moduleNames;
  }

  static read(path = "/proc/kallsyms"): KernelSymbols {
    return new KernelSymbols(new Uint8Array(readFileSync(path)));
  }

  /**
   * The same as read(), without holding the event loop: the file is read off the main thread (the kernel formats
   * /proc/kallsyms as it is read: ~45 ms here) and parsed LOAD_SLICE_LINES lines at a time, yielding in between.
   */
  static async load(path = "/proc/kallsyms"): Promise<KernelSymbols> {
    const parser = new KallsymsParser(new Uint8Array(await readFile(path)));
    while (parser.step(LOAD_SLICE_LINES)) await new Promise<void>((resolve) => setImmediate(resolve));
    return new KernelSymbols(parser);
  }

  get size(): number {
    return this.#table.size;
  }

  /** The function at a kernel address and the module it belongs to ("" for the kernel image). */
  lookup(address: bigint): { name: string; module: string } | undefined {
    if (address < this.#base) return undefined;
    const offset = Number(address - this.#base);
    const i = this.#table.indexOf(offset);
    if (i < 0) return undefined;
    const module = this.#table.tagAt(i);
    return { name: this.#table.nameAt(i), module: module ? this.#moduleNames[module - 1]! : "" };
  }
}

function hexValue(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const l = c | 0x20;
  if (l >= 0x61 && l <= 0x66) return l - 0x61 + 10;
  return -1;
}
