/** Kernel symbols from /proc/kallsyms (text symbols only), for kernel stack frames. */
import { readFileSync } from "node:fs";
import { SymbolTable } from "./symbol-table";

const NL = 0x0a;
const SPACE = 0x20;
const TAB = 0x09;
const TWO_32 = 0x1_0000_0000;
const utf8 = new TextDecoder();

export class KernelSymbols {
  /** Kernel addresses exceed 2^53: the table holds offsets from `#base`. */
  readonly #base: bigint;
  readonly #table: SymbolTable;
  /** Module names; a symbol's tag is 0 for the kernel image, else 1 + an index here. */
  readonly #moduleNames: string[] = [];

  /** Parses kallsyms (text or bytes), kept as bytes: names are decoded when looked up. Addresses of 0 (kptr_restrict hides them) leave the table empty. */
  constructor(source: string | Uint8Array) {
    const text = typeof source === "string" ? new TextEncoder().encode(source) : source;
    let lines = 0;
    for (let i = 0; i < text.length; i++) if (text[i] === NL) lines++;
    lines++;
    const hi = new Uint32Array(lines);
    const lo = new Uint32Array(lines);
    const nameStarts = new Uint32Array(lines);
    const nameEnds = new Uint32Array(lines);
    const moduleOf = new Uint16Array(lines);
    const modules = new Map<string, number>();
    let n = 0;
    let minHi = 0xffff_ffff;
    let minLo = 0xffff_ffff;
    for (let p = 0; p < text.length; ) {
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
        const x = l * 16 + v;
        l = x % TWO_32;
        h = (h * 16 + Math.floor(x / TWO_32)) % TWO_32;
      }
      if (i + 3 > end || text[i] !== SPACE || digits === 0) continue;
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
        module = modules.get(m) ?? 0;
        if (!module) {
          this.#moduleNames.push(m);
          modules.set(m, (module = this.#moduleNames.length));
        }
      }
      hi[n] = h;
      lo[n] = l;
      nameStarts[n] = nameStart;
      nameEnds[n] = nameEnd;
      moduleOf[n] = module;
      if (h < minHi || (h === minHi && l < minLo)) {
        minHi = h;
        minLo = l;
      }
      n++;
    }
    this.#base = n > 0 ? (BigInt(minHi) << 32n) | BigInt(minLo) : 0n;
    const addresses = new Float64Array(n);
    for (let k = 0; k < n; k++) addresses[k] = (hi[k]! - minHi) * TWO_32 + (lo[k]! - minLo);
    // The names alone, back to back (the file's addresses, types and module columns are not kept: ~45% of it).
    let nameBytes = 0;
    for (let k = 0; k < n; k++) nameBytes += nameEnds[k]! - nameStarts[k]!;
    const names = new Uint8Array(nameBytes);
    for (let k = 0, at = 0; k < n; k++) {
      names.set(text.subarray(nameStarts[k]!, nameEnds[k]!), at);
      nameEnds[k] = at + nameEnds[k]! - nameStarts[k]!;
      nameStarts[k] = at;
      at = nameEnds[k]!;
    }
    // Kernel symbols have no sizes: each extends to the next.
    this.#table = new SymbolTable({ count: n, addresses, text: names, nameStarts, nameEnds, tags: moduleOf });
  }

  static read(path = "/proc/kallsyms"): KernelSymbols {
    return new KernelSymbols(new Uint8Array(readFileSync(path)));
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
