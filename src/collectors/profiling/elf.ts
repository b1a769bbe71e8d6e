/**
 * A small reader of ELF64 little-endian files (x86_64 binaries and shared libraries): the GNU build id, the
 * PT_LOAD segments (to turn a file offset into a virtual address), the function symbols of .symtab and
 * .dynsym, and where a named section lies in the file. Reads only the parts it needs, with positioned reads.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { SymbolTable } from "./symbol-table";

const ELF_MAGIC = 0x464c457f;
const ELFCLASS64 = 2;
const ELFDATA2LSB = 1;
const PT_LOAD = 1;
const SHT_SYMTAB = 2;
const SHT_NOTE = 7;
const SHT_DYNSYM = 11;
const STT_FUNC = 2;
const STT_GNU_IFUNC = 10;
const NT_GNU_BUILD_ID = 3;
const PHDR_BYTES = 56;
const SHDR_BYTES = 64;
const SYM_BYTES = 24;
/** Symbol sections larger than this are not read (a safety bound). */
const MAX_SECTION_BYTES = 512 * 1024 * 1024;

export class ElfError extends Error {
  override readonly name = "ElfError";
  constructor(readonly path: string, detail: string) {
    super(`${path}: ${detail}`);
  }
}

export interface LoadSegment {
  fileOffset: number;
  vaddr: number;
  fileSize: number;
}

export interface ElfInfo {
  /** Hex of the GNU build id note, "" when the file has none. */
  buildId: string;
  segments: LoadSegment[];
  /** Whether the file is position-independent (ET_DYN). */
  shared: boolean;
}

function pread(fd: number, offset: number, length: number, path: string): DataView {
  const buf = new Uint8Array(length);
  const n = readSync(fd, buf, 0, length, offset);
  if (n < length) throw new ElfError(path, `short read at ${offset} (${n} of ${length} bytes)`);
  return new DataView(buf.buffer);
}

interface Section {
  /** Offset of the name in the section name table. */
  name: number;
  type: number;
  offset: number;
  size: number;
  link: number;
}

/** An open ELF file. close() when done. */
export class ElfFile implements Disposable {
  readonly path: string;
  readonly #fd: number;
  readonly #sections: Section[];
  /** Index of the section name table (e_shstrndx). */
  readonly #names: number;
  readonly info: ElfInfo;

  /** Opens and checks the header; throws ElfError when it is not an ELF64 little-endian file. */
  constructor(path: string) {
    this.path = path;
    this.#fd = openSync(path, "r");
    try {
      const size = fstatSync(this.#fd).size;
      if (size < 64) throw new ElfError(path, "too small for an ELF header");
      const h = pread(this.#fd, 0, 64, path);
      if (h.getUint32(0, true) !== ELF_MAGIC) throw new ElfError(path, "not an ELF file");
      if (h.getUint8(4) !== ELFCLASS64 || h.getUint8(5) !== ELFDATA2LSB) throw new ElfError(path, "not ELF64 little-endian");
      const type = h.getUint16(16, true);
      const phoff = Number(h.getBigUint64(32, true));
      const shoff = Number(h.getBigUint64(40, true));
      const phnum = h.getUint16(56, true);
      const shnum = h.getUint16(60, true);
      this.#names = h.getUint16(62, true);
      const segments: LoadSegment[] = [];
      if (phnum > 0) {
        const ph = pread(this.#fd, phoff, phnum * PHDR_BYTES, path);
        for (let i = 0; i < phnum; i++) {
          const o = i * PHDR_BYTES;
          if (ph.getUint32(o, true) !== PT_LOAD) continue;
          segments.push({ fileOffset: Number(ph.getBigUint64(o + 8, true)), vaddr: Number(ph.getBigUint64(o + 16, true)), fileSize: Number(ph.getBigUint64(o + 32, true)) });
        }
      }
      this.#sections = [];
      if (shnum > 0 && shoff > 0 && shoff + shnum * SHDR_BYTES <= size) {
        const sh = pread(this.#fd, shoff, shnum * SHDR_BYTES, path);
        for (let i = 0; i < shnum; i++) {
          const o = i * SHDR_BYTES;
          this.#sections.push({
            name: sh.getUint32(o, true),
            type: sh.getUint32(o + 4, true),
            offset: Number(sh.getBigUint64(o + 24, true)),
            size: Number(sh.getBigUint64(o + 32, true)),
            link: sh.getUint32(o + 40, true),
          });
        }
      }
      this.info = { buildId: this.#buildId(), segments, shared: type === 3 };
    } catch (e) {
      closeSync(this.#fd);
      throw e;
    }
  }

  #buildId(): string {
    for (const s of this.#sections) {
      if (s.type !== SHT_NOTE || s.size > 65536) continue;
      const d = pread(this.#fd, s.offset, s.size, this.path);
      let o = 0;
      while (o + 12 <= s.size) {
        const namesz = d.getUint32(o, true);
        const descsz = d.getUint32(o + 4, true);
        const type = d.getUint32(o + 8, true);
        const nameStart = o + 12;
        const descStart = nameStart + align4(namesz);
        if (descStart + descsz > s.size) break;
        const name = new TextDecoder().decode(new Uint8Array(d.buffer, nameStart, Math.max(0, namesz - 1)));
        if (type === NT_GNU_BUILD_ID && name === "GNU") return Buffer.from(new Uint8Array(d.buffer, descStart, descsz)).toString("hex");
        o = descStart + align4(descsz);
      }
    }
    return "";
  }

  /** Where the section named `name` lies in the file, undefined when there is none. */
  sectionRange(name: string): { offset: number; size: number } | undefined {
    const names = this.#sections[this.#names];
    if (!names || names.size > MAX_SECTION_BYTES) return undefined;
    const table = new Uint8Array(pread(this.#fd, names.offset, names.size, this.path).buffer);
    const wanted = new TextEncoder().encode(`${name}\0`);
    for (const s of this.#sections) {
      if (s.name + wanted.length > table.length) continue;
      if (wanted.every((b, i) => table[s.name + i] === b)) return { offset: s.offset, size: s.size };
    }
    return undefined;
  }

  /** The symbol sections (.symtab, .dynsym) read with their string tables. */
  #symbolTables(): Array<{ syms: DataView; size: number; strs: Uint8Array }> {
    const tables: Array<{ syms: DataView; size: number; strs: Uint8Array }> = [];
    for (const s of this.#sections) {
      if (s.type !== SHT_SYMTAB && s.type !== SHT_DYNSYM) continue;
      const strtab = this.#sections[s.link];
      if (!strtab || s.size > MAX_SECTION_BYTES || strtab.size > MAX_SECTION_BYTES) continue;
      const syms = pread(this.#fd, s.offset, s.size, this.path);
      const strs = new Uint8Array(pread(this.#fd, strtab.offset, strtab.size, this.path).buffer);
      tables.push({ syms, size: s.size, strs });
    }
    return tables;
  }

  /**
   * The function symbols named `names` (those symbols() would list), each at its lowest address (the larger size
   * first at the same address), as symbols() would find it first. Compares names as bytes in place: no table of
   * every symbol is built or sorted (an executable such as node carries hundreds of thousands).
   */
  functionSymbols(names: readonly string[]): Map<string, { address: number; size: number }> {
    const wanted = names.map((n) => ({ name: n, bytes: new TextEncoder().encode(n) }));
    const out = new Map<string, { address: number; size: number }>();
    for (const { syms, size, strs } of this.#symbolTables()) {
      for (let o = 0; o + SYM_BYTES <= size; o += SYM_BYTES) {
        const nameOff = syms.getUint32(o, true);
        if (nameOff >= strs.length) continue;
        const first = strs[nameOff];
        const w = wanted.find(({ bytes }) => bytes[0] === first && strs[nameOff + bytes.length] === 0 && bytes.every((b, i) => strs[nameOff + i] === b));
        if (!w) continue;
        const kind = syms.getUint8(o + 4) & 0xf;
        if (kind !== STT_FUNC && kind !== STT_GNU_IFUNC) continue;
        if (syms.getUint16(o + 6, true) === 0) continue;
        const address = Number(syms.getBigUint64(o + 8, true));
        if (address === 0) continue;
        const symSize = Number(syms.getBigUint64(o + 16, true));
        const seen = out.get(w.name);
        if (!seen || address < seen.address || (address === seen.address && symSize > seen.size)) out.set(w.name, { address, size: symSize });
      }
    }
    return out;
  }

  /** Function symbols (STT_FUNC, STT_GNU_IFUNC, defined) of .symtab and .dynsym, by virtual address; names stay bytes until looked up. */
  symbols(): SymbolTable {
    const tables = this.#symbolTables();
    let max = 0;
    let textBytes = 0;
    for (const t of tables) {
      max += Math.floor(t.size / SYM_BYTES);
      textBytes += t.strs.length;
    }
    // The function names back to back in one buffer (grown as needed, then cut): a name is a byte range of it.
    let all = new Uint8Array(Math.max(64, textBytes));
    let used = 0;
    const addresses = new Float64Array(max);
    const sizes = new Float64Array(max);
    const nameStarts = new Uint32Array(max);
    const nameEnds = new Uint32Array(max);
    let count = 0;
    for (const { syms, size, strs } of tables) {
      for (let o = 0; o + SYM_BYTES <= size; o += SYM_BYTES) {
        const kind = syms.getUint8(o + 4) & 0xf;
        if (kind !== STT_FUNC && kind !== STT_GNU_IFUNC) continue;
        if (syms.getUint16(o + 6, true) === 0) continue;
        const address = Number(syms.getBigUint64(o + 8, true));
        if (address === 0) continue;
        const nameOff = syms.getUint32(o, true);
        if (nameOff >= strs.length) continue;
        let end = strs.indexOf(0, nameOff);
        if (end < 0) end = strs.length;
        addresses[count] = address;
        sizes[count] = Number(syms.getBigUint64(o + 16, true));
        if (used + (end - nameOff) > all.length) {
          const grown = new Uint8Array(Math.max(all.length * 2, used + (end - nameOff)));
          grown.set(all.subarray(0, used));
          all = grown;
        }
        all.set(strs.subarray(nameOff, end), used);
        nameStarts[count] = used;
        used += end - nameOff;
        nameEnds[count] = used;
        count++;
      }
    }
    return new SymbolTable({ count, addresses, sizes, text: all.slice(0, used), nameStarts, nameEnds });
  }

  close(): void {
    closeSync(this.#fd);
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

function align4(n: number): number {
  return (n + 3) & ~3;
}

/** The virtual address of a file offset, through the PT_LOAD segment that holds it (undefined when none does). */
export function fileOffsetToVaddr(segments: readonly LoadSegment[], fileOffset: number): number | undefined {
  for (const s of segments) if (fileOffset >= s.fileOffset && fileOffset < s.fileOffset + s.fileSize) return fileOffset - s.fileOffset + s.vaddr;
  return undefined;
}
