/**
 * Where the probes of a TLS library go. A uprobe traps on its instruction; the kernel then either emulates that
 * instruction (x86-64: push of a register, call, jmp, conditional jumps) or single-steps a copy of it out of line,
 * a second trap. The single step is the cost that matters: on a virtual machine it can be thirty times the rest
 * (14.5 µs against 0.45 µs a hit for a probe on `sub $8,%rsp` against one on `push %rbx`, measured on the 2-core
 * VM this project is built on), and OpenSSL 3's SSL_read/SSL_write(_ex) all start with `sub $N,%rsp`.
 *
 * So, from the library's code:
 * - SSL_read_ex and SSL_write_ex of OpenSSL 1.1.1/3.0 are wrappers: `sub $N,%rsp` then straight away `call T`,
 *   where T (ssl_read_internal, ssl_write_internal; not exported) takes the same four arguments, since nothing
 *   touched a register in between, and returns > 0 on success with the byte count written through the 4th.
 *   When T starts with a push (after an endbr64 or not), T is probed (entry and return) in their place, with the _ex form's program; and
 *   SSL_read (SSL_write) is left unprobed when its code calls the same T, which then sees its calls too.
 * - A function starting with `endbr64` (CET builds) then a push is probed on the push: endbr64 is single-stepped,
 *   and leaves the stack as it was (the return probe still finds the return address on top of it).
 * - Otherwise the function's entry.
 * Each site is a file offset found from the symbol tables read once here. A library whose code cannot be read is
 * probed at the functions' entries by name (libbpf then finds them).
 */
import { closeSync, openSync, readSync } from "node:fs";
import { ElfFile, type LoadSegment } from "../profiling/elf";
import type { TlsFunction } from "./targets";

/** One probed place: an entry probe running `program`'s entry program and a return probe. */
export interface ProbeSite {
  /** Whose entry program reads the arguments (an _ex form reads the byte count through its 4th). */
  program: TlsFunction;
  /** File offset of the probed instruction; undefined: the entry of the symbol `program`, which libbpf looks up. */
  offset?: number;
  /** The functions whose calls this site sees. */
  covers: TlsFunction[];
}

/** A defined function of the file: its virtual address and size (0 when unknown). */
export interface CodeSymbol {
  vaddr: number;
  size: number;
}

/** What the planner reads of a file. */
export interface CodeSource {
  /** The defined symbol of that name, undefined when absent. */
  symbol(name: TlsFunction): CodeSymbol | undefined;
  /** `length` bytes of code at a virtual address (fewer at the end of the file; empty when unmapped). */
  code(vaddr: number, length: number): Uint8Array;
  /** The file offset of a virtual address, undefined when no loaded segment holds it. */
  fileOffset(vaddr: number): number | undefined;
}

/** The wrapped pairs: the _ex form, whose callee takes its arguments, and the form returning the count. */
const WRAPPED: ReadonlyArray<[TlsFunction, TlsFunction]> = [
  ["SSL_read_ex", "SSL_read"],
  ["SSL_write_ex", "SSL_write"],
];
/** How much of a function is searched for its call of the wrapped callee. */
const CALL_SEARCH_BYTES = 512;

const isEndbr64 = (b: Uint8Array, at: number) => b[at] === 0xf3 && b[at + 1] === 0x0f && b[at + 2] === 0x1e && b[at + 3] === 0xfa;

/** Length of a `push` of a general register at `at` (1, or 2 with REX.B for r8-r15), 0 when it is not one. */
function pushLength(b: Uint8Array, at: number): number {
  const x = b[at];
  if (x !== undefined && x >= 0x50 && x <= 0x57) return 1;
  const y = b[at + 1];
  if (x === 0x41 && y !== undefined && y >= 0x50 && y <= 0x57) return 2;
  return 0;
}

/** Bytes from the function's start to its first instruction that the kernel emulates (a push), when only endbr64 precedes it. */
function cheapEntry(b: Uint8Array): number | undefined {
  if (pushLength(b, 0) > 0) return 0;
  if (isEndbr64(b, 0) && pushLength(b, 4) > 0) return 4;
  return undefined;
}

const rel32 = (b: Uint8Array, at: number) => (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >> 0;

/** The callee of a wrapper `[endbr64] sub $imm8,%rsp; call rel32`, undefined when the code is not that. */
function wrappedCallee(b: Uint8Array, vaddr: number): number | undefined {
  let at = isEndbr64(b, 0) ? 4 : 0;
  if (b[at] !== 0x48 || b[at + 1] !== 0x83 || b[at + 2] !== 0xec) return undefined;
  at += 4;
  if (b[at] !== 0xe8 || b.length < at + 5) return undefined;
  return vaddr + at + 5 + rel32(b, at + 1);
}

/** Whether the code holds a `call rel32` to `target`. */
function callsTo(b: Uint8Array, vaddr: number, target: number): boolean {
  for (let i = 0; i + 5 <= b.length; i++) if (b[i] === 0xe8 && vaddr + i + 5 + rel32(b, i + 1) === target) return true;
  return false;
}

/** The probe sites for `functions` (those the file defines), from its code. */
export function planSites(functions: readonly TlsFunction[], src: CodeSource): ProbeSite[] {
  const sites: ProbeSite[] = [];
  const covered = new Set<TlsFunction>();
  for (const [ex, plain] of WRAPPED) {
    const sym = functions.includes(ex) ? src.symbol(ex) : undefined;
    if (!sym) continue;
    const callee = wrappedCallee(src.code(sym.vaddr, 16), sym.vaddr);
    const skip = callee === undefined ? undefined : cheapEntry(src.code(callee, 8));
    if (callee === undefined || skip === undefined) continue;
    const offset = src.fileOffset(callee + skip);
    if (offset === undefined) continue;
    const covers: TlsFunction[] = [ex];
    const p = functions.includes(plain) ? src.symbol(plain) : undefined;
    if (p && callsTo(src.code(p.vaddr, Math.min(CALL_SEARCH_BYTES, p.size > 0 ? p.size : CALL_SEARCH_BYTES)), p.vaddr, callee)) covers.push(plain);
    sites.push({ program: ex, offset, covers });
    for (const f of covers) covered.add(f);
  }
  for (const f of functions) {
    if (covered.has(f)) continue;
    const sym = src.symbol(f);
    // Past an endbr64 to the push when there is one, else the entry. Given as a file offset: libbpf, given the name,
    // would read the file's symbol tables again for each probe (tens of ms each for an executable such as node).
    const offset = sym ? src.fileOffset(sym.vaddr + (cheapEntry(src.code(sym.vaddr, 8)) ?? 0)) : undefined;
    sites.push(offset === undefined ? { program: f, covers: [f] } : { program: f, offset, covers: [f] });
  }
  return sites;
}

/** The functions' entries, as libbpf resolves them (the plan when the code cannot be read). */
export const entrySites = (functions: readonly TlsFunction[]): ProbeSite[] => functions.map((f) => ({ program: f, covers: [f] }));

/** The file offset of a virtual address through the loaded segments. */
function vaddrToFileOffset(segments: readonly LoadSegment[], vaddr: number): number | undefined {
  for (const s of segments) if (vaddr >= s.vaddr && vaddr < s.vaddr + s.fileSize) return vaddr - s.vaddr + s.fileOffset;
  return undefined;
}

/** The probe sites of the library (or executable) at `path`; the entries when its ELF cannot be read. */
export function probeSites(path: string, functions: readonly TlsFunction[]): ProbeSite[] {
  try {
    using elf = new ElfFile(path);
    const symbols = new Map<string, CodeSymbol>();
    for (const [name, s] of elf.functionSymbols(functions)) symbols.set(name, { vaddr: s.address, size: s.size });
    const segments = elf.info.segments;
    const fd = openSync(path, "r");
    try {
      return planSites(functions, {
        symbol: (name) => symbols.get(name),
        fileOffset: (vaddr) => vaddrToFileOffset(segments, vaddr),
        code: (vaddr, length) => {
          const at = vaddrToFileOffset(segments, vaddr);
          if (at === undefined) return new Uint8Array(0);
          const buf = new Uint8Array(length);
          return buf.subarray(0, readSync(fd, buf, 0, length, at));
        },
      });
    } finally {
      closeSync(fd);
    }
  } catch {
    return entrySites(functions);
  }
}
