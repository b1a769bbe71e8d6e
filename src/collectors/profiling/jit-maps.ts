/**
 * Symbols of JIT-compiled code, as runtimes publish them:
 *   - perf maps, `/tmp/perf-<pid>.map`: one `START SIZE name` line per function (hex, with or without 0x);
 *   - jitdump files (`jit-<pid>.dump`, the format of the Linux perf tools), which runtimes mmap so that they
 *     appear in /proc/<pid>/maps; Bun writes one with BUN_JSC_useJITDump=1. Read incrementally as they grow.
 */
import { closeSync, fstatSync, openSync, readFileSync, readSync, statSync } from "node:fs";
import { SymbolTable, type SymbolEntry } from "./symbol-table";

const JITDUMP_MAGIC = 0x4a695444;
const JIT_CODE_LOAD = 0;
const JIT_CODE_MOVE = 1;
const RECORD_HEADER_BYTES = 16;
const CODE_LOAD_FIXED_BYTES = 40;

/** Parses perf map text into a table. Lines that do not parse are skipped. */
export function parsePerfMap(text: string): SymbolTable {
  const entries: SymbolEntry[] = [];
  for (const line of text.split("\n")) {
    const m = /^(?:0x)?([0-9a-fA-F]+) (?:0x)?([0-9a-fA-F]+) (.+)$/.exec(line.trim());
    if (!m) continue;
    entries.push({ address: parseInt(m[1]!, 16), size: parseInt(m[2]!, 16), name: m[3]! });
  }
  return new SymbolTable(entries);
}

/** A perf map file re-read when its size or mtime changes. */
export class PerfMapFile {
  #stamp = "";
  #table: SymbolTable | undefined;
  constructor(readonly path: string) {}

  /** The table as last read (no I/O). */
  get current(): SymbolTable | undefined {
    return this.#table;
  }

  /** The current table, or undefined when the file does not exist (re-read when it changed). */
  table(): SymbolTable | undefined {
    let stamp: string;
    try {
      const s = statSync(this.path);
      stamp = `${s.size}:${s.mtimeMs}`;
    } catch {
      this.#table = undefined;
      this.#stamp = "";
      return undefined;
    }
    if (stamp !== this.#stamp) {
      this.#table = parsePerfMap(readFileSync(this.path, "utf8"));
      this.#stamp = stamp;
    }
    return this.#table;
  }
}

/** A jitdump file read incrementally: only records appended since the last read are parsed. */
export class JitDumpFile {
  readonly #byAddress = new Map<number, SymbolEntry>();
  #offset = 0;
  #table: SymbolTable | undefined;
  #valid = true;
  constructor(readonly path: string) {}

  /** The table as last read (no I/O). */
  get current(): SymbolTable | undefined {
    return this.#table;
  }

  /** The table of every code load seen so far (a later load at the same address replaces an earlier one). */
  table(): SymbolTable | undefined {
    if (!this.#valid) return undefined;
    let fd: number;
    try {
      fd = openSync(this.path, "r");
    } catch {
      return this.#table;
    }
    try {
      const size = fstatSync(fd).size;
      if (size <= this.#offset) return this.#table;
      const buf = Buffer.alloc(size - this.#offset);
      const n = readSync(fd, buf, 0, buf.length, this.#offset);
      const dv = new DataView(buf.buffer, buf.byteOffset, n);
      let o = 0;
      if (this.#offset === 0) {
        if (n < 12 || dv.getUint32(0, true) !== JITDUMP_MAGIC) {
          this.#valid = false;
          return undefined;
        }
        o = dv.getUint32(8, true);
      }
      let changed = false;
      while (o + RECORD_HEADER_BYTES <= n) {
        const id = dv.getUint32(o, true);
        const total = dv.getUint32(o + 4, true);
        if (total < RECORD_HEADER_BYTES || o + total > n) break;
        const body = o + RECORD_HEADER_BYTES;
        if (id === JIT_CODE_LOAD && total >= RECORD_HEADER_BYTES + CODE_LOAD_FIXED_BYTES) {
          const address = Number(dv.getBigUint64(body + 16, true));
          const codeSize = Number(dv.getBigUint64(body + 24, true));
          const nameEnd = buf.indexOf(0, body + CODE_LOAD_FIXED_BYTES);
          const name = buf.toString("utf8", body + CODE_LOAD_FIXED_BYTES, nameEnd < 0 || nameEnd > o + total ? o + total : nameEnd);
          this.#byAddress.set(address, { address, size: codeSize, name });
          changed = true;
        } else if (id === JIT_CODE_MOVE && total >= RECORD_HEADER_BYTES + 48) {
          const oldAddress = Number(dv.getBigUint64(body + 16, true));
          const newAddress = Number(dv.getBigUint64(body + 24, true));
          const moved = this.#byAddress.get(oldAddress);
          if (moved) {
            this.#byAddress.delete(oldAddress);
            this.#byAddress.set(newAddress, { ...moved, address: newAddress });
            changed = true;
          }
        }
        o += total;
      }
      this.#offset += o;
      if (changed || !this.#table) this.#table = new SymbolTable([...this.#byAddress.values()]);
      return this.#table;
    } finally {
      closeSync(fd);
    }
  }
}
