import { describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, writeFileSync, appendFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { Profile } from "pprof-format";
import { decodeCount, decodeProfileKey, decodeStack, PROFILE_KEY_BYTES } from "../../../../src/collectors/profiling/decode";
import { ElfFile, fileOffsetToVaddr } from "../../../../src/collectors/profiling/elf";
import { JitDumpFile, parsePerfMap } from "../../../../src/collectors/profiling/jit-maps";
import { KernelSymbols } from "../../../../src/collectors/profiling/kallsyms";
import { encodePprof } from "../../../../src/collectors/profiling/pprof";
import { SymbolTable } from "../../../../src/collectors/profiling/symbol-table";
import { parseMaps } from "../../../../src/collectors/profiling/symbolizer";

describe("profile map decoders", () => {
  test("struct profile_key: pid, stack ids (negative errno kept), comm", () => {
    const b = new Uint8Array(PROFILE_KEY_BYTES);
    const dv = new DataView(b.buffer);
    dv.setUint32(0, 4242, true);
    dv.setInt32(4, 17, true);
    dv.setInt32(8, -14, true);
    b.set(new TextEncoder().encode("cpu-burner"), 16);
    expect(decodeProfileKey(b)).toEqual({ pid: 4242, userStackId: 17, kernelStackId: -14, comm: "cpu-burner" });
    expect(() => decodeProfileKey(new Uint8Array(8))).toThrow(RangeError);
  });
  test("stack values end at the first zero address; counts are u64", () => {
    const v = new BigUint64Array(127);
    v.set([0xffffffff81000010n, 0x401136n, 0x401200n]);
    expect(decodeStack(new Uint8Array(v.buffer))).toEqual([0xffffffff81000010n, 0x401136n, 0x401200n]);
    expect(decodeCount(new Uint8Array(new BigUint64Array([99n]).buffer))).toBe(99);
  });
});

describe("symbol tables", () => {
  const t = new SymbolTable([
    { address: 0x2000, size: 0x10, name: "b" },
    { address: 0x1000, size: 0x100, name: "a" },
    { address: 0x3000, size: 0, name: "c_unsized" },
  ]);
  test("finds the containing function, respects sizes, and lets unsized symbols run to the next", () => {
    expect(t.lookup(0x1000)).toBe("a");
    expect(t.lookup(0x10ff)).toBe("a");
    expect(t.lookup(0x1100)).toBeUndefined();
    expect(t.lookup(0x2008)).toBe("b");
    expect(t.lookup(0x9999)).toBe("c_unsized");
    expect(t.lookup(0xfff)).toBeUndefined();
  });
  test("kallsyms: text symbols only, modules kept, addresses beyond 2^53 exact", () => {
    const k = new KernelSymbols(
      "ffffffff81000000 T _stext\nffffffff81000100 t do_syscall_64\nffffffff81000200 D some_data\nffffffffc0001000 t nf_hook\t[nf_tables]\n",
    );
    expect(k.size).toBe(3);
    expect(k.lookup(0xffffffff81000150n)).toEqual({ name: "do_syscall_64", module: "" });
    expect(k.lookup(0xffffffff81000250n)).toEqual({ name: "do_syscall_64", module: "" });
    expect(k.lookup(0xffffffffc0001004n)).toEqual({ name: "nf_hook", module: "nf_tables" });
    expect(new KernelSymbols("0000000000000000 T hidden\n").size).toBe(0);
  });
  // The host's own table, read as the profiler reads it (root: real addresses), against a plain parse of the text.
  const kallsyms = existsSync("/proc/kallsyms") ? readFileSync("/proc/kallsyms", "utf8") : "";
  test.skipIf(!/^[0-9a-f]*[1-9a-f][0-9a-f]* /m.test(kallsyms))("kallsyms of this host: every text symbol (each 50th) looked up to a symbol of its address and module", () => {
    const k = new KernelSymbols(new TextEncoder().encode(kallsyms));
    const byAddress = new Map<bigint, Array<{ name: string; module: string }>>();
    const text: Array<[bigint, string, string]> = [];
    for (const line of kallsyms.split("\n")) {
      const m = /^([0-9a-f]+) ([tTwW]) (\S+)(?:\t\[(\S+)\])?$/.exec(line);
      if (!m || BigInt(`0x${m[1]}`) === 0n) continue;
      const a = BigInt(`0x${m[1]}`);
      byAddress.set(a, [...(byAddress.get(a) ?? []), { name: m[3]!, module: m[4] ?? "" }]);
      text.push([a, m[3]!, m[4] ?? ""]);
    }
    expect(k.size).toBe(text.length);
    for (let i = 0; i < text.length; i += 50) {
      const [a] = text[i]!;
      expect(byAddress.get(a)).toContainEqual(k.lookup(a)!);
    }
  });
  test.skipIf(!/^[0-9a-f]*[1-9a-f][0-9a-f]* /m.test(kallsyms))("kallsyms loaded without holding the event loop: the same table as read(), with turns of the loop in between", async () => {
    let turns = 0;
    let running = true;
    const spin = () => {
      if (!running) return;
      turns++;
      setImmediate(spin);
    };
    setImmediate(spin);
    const loaded = await KernelSymbols.load();
    running = false;
    const read = KernelSymbols.read();
    expect(loaded.size).toBe(read.size);
    // The file is read off the main thread and parsed in slices: other callbacks ran while it loaded.
    expect(turns).toBeGreaterThan(2);
    const addresses = kallsyms.split("\n").flatMap((l) => (/^[0-9a-f]+ [tTwW] /.test(l) ? [BigInt(`0x${l.slice(0, l.indexOf(" "))}`)] : []));
    for (let i = 0; i < addresses.length; i += 97) expect(loaded.lookup(addresses[i]!)).toEqual(read.lookup(addresses[i]!));
  });
  // A shared library and executables with and without OpenSSL's symbols (node carries them in both tables).
  const elfFiles = ["/usr/lib/x86_64-linux-gnu/libssl.so.3", "/usr/bin/node", "/usr/bin/python3", process.execPath].filter((f) => existsSync(f));
  test.each(elfFiles)("ELF named function symbols in place: exactly those the sorted table finds first (%s)", (path) => {
    const names = ["SSL_read", "SSL_write", "SSL_read_ex", "SSL_write_ex", "main", "malloc", "no_such_function_here"];
    using elf = new ElfFile(path);
    const table = elf.symbols();
    const expected = new Map<string, { address: number; size: number }>();
    for (let i = 0; i < table.size; i++) {
      const name = table.nameAt(i);
      if (names.includes(name) && !expected.has(name)) expected.set(name, { address: table.addressAt(i), size: table.sizeAt(i) });
    }
    const found = elf.functionSymbols(names);
    expect(Object.fromEntries([...found].sort())).toEqual(Object.fromEntries([...expected].sort()));
    expect(found.has("no_such_function_here")).toBe(false);
  });
  test("ELF file offsets map to virtual addresses through PT_LOAD segments", () => {
    const segs = [{ fileOffset: 0, vaddr: 0, fileSize: 0x1000 }, { fileOffset: 0x1000, vaddr: 0x401000, fileSize: 0x2000 }];
    expect(fileOffsetToVaddr(segs, 0x1136)).toBe(0x401136);
    expect(fileOffsetToVaddr(segs, 0x5000)).toBeUndefined();
  });
});

describe("JIT symbol sources and process maps", () => {
  test("perf map lines, with or without 0x, names with spaces", () => {
    const t = parsePerfMap("7f0000001000 40 LazyCompile:*hot file.js:3\n0x7f0000002000 0x10 stub\nnot a line\n");
    expect(t.lookup(0x7f0000001020)).toBe("LazyCompile:*hot file.js:3");
    expect(t.lookup(0x7f000000200f)).toBe("stub");
    expect(t.size).toBe(2);
  });

  test("jitdump: header, code loads (later ones replace earlier at the same address), moves, incremental growth", () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-jitdump-"));
    const path = join(dir, "jit-1.dump");
    const header = new Uint8Array(40);
    const h = new DataView(header.buffer);
    h.setUint32(0, 0x4a695444, true);
    h.setUint32(4, 1, true);
    h.setUint32(8, 40, true);
    const load = (addr: bigint, size: bigint, name: string) => {
      const n = new TextEncoder().encode(name + "\0");
      const r = new Uint8Array(16 + 40 + n.length + Number(size));
      const d = new DataView(r.buffer);
      d.setUint32(0, 0, true);
      d.setUint32(4, r.length, true);
      d.setBigUint64(16 + 8, addr, true); // vma
      d.setBigUint64(16 + 16, addr, true); // code_addr
      d.setBigUint64(16 + 24, size, true);
      r.set(n, 56);
      return r;
    };
    const move = (from: bigint, to: bigint) => {
      const r = new Uint8Array(16 + 48);
      const d = new DataView(r.buffer);
      d.setUint32(0, 1, true);
      d.setUint32(4, r.length, true);
      d.setBigUint64(16 + 16, from, true);
      d.setBigUint64(16 + 24, to, true);
      return r;
    };
    writeFileSync(path, Buffer.concat([header, load(0x1000n, 0x20n, "JSC-Baseline: f#A"), load(0x2000n, 0x20n, "old")]));
    const f = new JitDumpFile(path);
    expect(f.table()!.lookup(0x1010)).toBe("JSC-Baseline: f#A");
    appendFileSync(path, Buffer.concat([load(0x2000n, 0x20n, "JSC-DFG: g#B"), move(0x1000n, 0x3000n)]));
    expect(f.table()!.lookup(0x2004)).toBe("JSC-DFG: g#B");
    expect(f.table()!.lookup(0x3004)).toBe("JSC-Baseline: f#A");
    expect(f.table()!.lookup(0x1004)).toBeUndefined();
    writeFileSync(join(dir, "bad.dump"), "not a jitdump file at all");
    expect(new JitDumpFile(join(dir, "bad.dump")).table()).toBeUndefined();
  });

  test("/proc/<pid>/maps: executable mappings sorted, deleted files, jitdump mappings found", () => {
    const m = parseMaps(
      [
        "7f00aa000000-7f00aa022000 r-xp 00002000 fe:00 123  /usr/lib/x86_64-linux-gnu/libc.so.6",
        "55d0c8a00000-55d0c8a01000 r--p 00000000 fe:00 456  /tmp/prog",
        "55d0c8a01000-55d0c8a02000 r-xp 00001000 fe:00 456  /tmp/prog (deleted)",
        "7f00bb000000-7f00bb001000 r-xp 00000000 fe:00 789  /tmp/jd/jit-77-77.dump",
        "7f00cc000000-7f00cc100000 rwxp 00000000 00:00 0 ",
      ].join("\n"),
    );
    expect(m.exec.map((e) => e.path)).toEqual(["/tmp/prog", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/tmp/jd/jit-77-77.dump", ""]);
    expect(m.exec[0]).toEqual({ start: 0x55d0c8a01000, end: 0x55d0c8a02000, offset: 0x1000, path: "/tmp/prog" });
    expect(m.jitdumps).toEqual(["/tmp/jd/jit-77-77.dump"]);
  });
});

describe("pprof", () => {
  test("profiles of one period become one pprof with samples, cpu time, labels and locations", () => {
    const gz = encodePprof([
      {
        resource: { "process.pid": 7, "process.executable.name": "prog" },
        sampleType: { type: "samples", unit: "count" },
        period: 10_101_010,
        timeUnixNano: 1_000n,
        durationNanos: 5_000_000_000n,
        samples: [
          { stack: [{ function: "leaf", binary: "/bin/prog", address: 0x10n, buildId: "beef" }, { function: "main", binary: "/bin/prog", address: 0x20n, buildId: "beef" }], value: 3, attributes: { "thread.name": "worker" } },
          { stack: [{ function: "leaf", binary: "/bin/prog", address: 0x10n, buildId: "beef" }], value: 1 },
        ],
      },
    ]);
    const p = Profile.decode(gunzipSync(gz));
    const str = (i: unknown) => p.stringTable.strings[Number(i)];
    expect(p.sampleType.map((t) => `${str(t.type)}/${str(t.unit)}`)).toEqual(["samples/count", "cpu/nanoseconds"]);
    expect(p.sample.map((s) => s.value.map(Number))).toEqual([[3, 30_303_030], [1, 10_101_010]]);
    expect(p.location).toHaveLength(2);
    expect(p.function.map((f) => str(f.name))).toEqual(["leaf", "main"]);
    expect(p.sample[0]!.label.map((l) => `${str(l.key)}=${l.str ? str(l.str) : Number(l.num)}`)).toEqual(["pid=7", "comm=prog", "thread=worker"]);
    expect(Number(p.period)).toBe(10_101_010);
    expect(p.mapping.map((m) => [str(m.filename), str(m.buildId)])).toEqual([["/bin/prog", "beef"]]);
  });
});

describe("user stack decoding", () => {
  test("user stacks decode to exact numbers", async () => {
    const { decodeUserStack } = await import("../../../../src/collectors/profiling/decode");
    const v = new BigUint64Array(127);
    v.set([0x7fff_ffff_f000n, 0x5555_5555_4000n]);
    expect(decodeUserStack(new Uint8Array(v.buffer))).toEqual([0x7fff_ffff_f000, 0x5555_5555_4000]);
  });
});
