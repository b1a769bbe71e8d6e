/** Kernel symbols from /proc/kallsyms (text symbols only), for kernel stack frames. */
import { readFileSync } from "node:fs";
import { SymbolTable, type SymbolEntry } from "./symbol-table";

export class KernelSymbols {
  /** Kernel addresses exceed 2^53: the table holds offsets from `#base`. */
  readonly #base: bigint;
  readonly #table: SymbolTable;
  readonly #modules: Map<string, string>;

  /** Parses kallsyms text. Addresses of 0 (kptr_restrict hides them) leave the table empty. */
  constructor(text: string) {
    const rows: Array<{ address: bigint; name: string }> = [];
    this.#modules = new Map();
    for (const line of text.split("\n")) {
      const sp1 = line.indexOf(" ");
      if (sp1 < 0) continue;
      const type = line.charCodeAt(sp1 + 1) | 0x20;
      if (type !== 0x74 /* t */ && type !== 0x77 /* w */) continue;
      const address = BigInt(`0x${line.slice(0, sp1)}`);
      if (address === 0n) continue;
      let name = line.slice(sp1 + 3);
      const tab = name.indexOf("\t");
      if (tab >= 0) {
        const module = name.slice(tab + 1).replace(/^\[|\]$/g, "");
        name = name.slice(0, tab);
        this.#modules.set(name, module);
      }
      rows.push({ address, name });
    }
    let base = rows.length > 0 ? rows[0]!.address : 0n;
    for (const r of rows) if (r.address < base) base = r.address;
    this.#base = base;
    this.#table = new SymbolTable(rows.map((r): SymbolEntry => ({ address: Number(r.address - base), size: 0, name: r.name })));
  }

  static read(path = "/proc/kallsyms"): KernelSymbols {
    return new KernelSymbols(readFileSync(path, "utf8"));
  }

  get size(): number {
    return this.#table.size;
  }

  /** The function at a kernel address and the module it belongs to ("" for the kernel image). */
  lookup(address: bigint): { name: string; module: string } | undefined {
    if (address < this.#base) return undefined;
    const name = this.#table.lookup(Number(address - this.#base));
    return name === undefined ? undefined : { name, module: this.#modules.get(name) ?? "" };
  }
}
