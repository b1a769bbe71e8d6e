/** ELF reading and user-frame symbolization against binaries gcc builds here, through a fake /proc tree. */
import { beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ElfError, ElfFile } from "../../../src/collectors/profiling/elf";
import { Symbolizer } from "../../../src/collectors/profiling/symbolizer";

const FIXTURE = join(import.meta.dir, "../../fixtures/cpu-burner.c");
const dir = mkdtempSync(join(tmpdir(), "svc-elf-"));
const bin = join(dir, "cpu-burner");
const stripped = join(dir, "cpu-burner-stripped");

beforeAll(() => {
  for (const args of [["gcc", "-O0", "-g", "-fno-omit-frame-pointer", "-o", bin, FIXTURE], ["strip", "--strip-all", "-o", stripped, bin]]) {
    const r = Bun.spawnSync(args);
    if (r.exitCode !== 0) throw new Error(`${args[0]} failed: ${r.stderr.toString()}`);
  }
});

function nm(path: string, symbol: string): number {
  const out = Bun.spawnSync(["nm", path]).stdout.toString();
  const line = out.split("\n").find((l) => l.endsWith(` ${symbol}`));
  if (!line) throw new Error(`nm: no ${symbol}`);
  return parseInt(line.split(" ")[0]!, 16);
}

describe("ELF reader", () => {
  test("build id, PT_LOAD segments and .symtab functions of a PIE built by gcc (checked against readelf and nm)", () => {
    using elf = new ElfFile(bin);
    const readelf = Bun.spawnSync(["readelf", "-n", bin]).stdout.toString();
    expect(readelf).toContain(`Build ID: ${elf.info.buildId}`);
    expect(elf.info.buildId).toMatch(/^[0-9a-f]{40}$/);
    expect(elf.info.shared).toBe(true);
    expect(elf.info.segments.length).toBeGreaterThanOrEqual(2);
    const table = elf.symbols();
    const addr = nm(bin, "burn_cpu_in_known_function");
    expect(table.lookup(addr)).toBe("burn_cpu_in_known_function");
    expect(table.lookup(addr + 5)).toBe("burn_cpu_in_known_function");
    expect(table.lookup(nm(bin, "main"))).toBe("main");
  });

  test("sectionRange: where a named section lies in the file, as readelf -S says; undefined for a name not there", () => {
    using elf = new ElfFile(bin);
    const line = Bun.spawnSync(["readelf", "-SW", bin])
      .stdout.toString()
      .split("\n")
      .find((l) => / \.text\s/.test(l));
    if (!line) throw new Error("readelf: no .text");
    const [, , , offset, size] = /\]\s+(\S+)\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)/.exec(line)!.slice(1);
    expect(elf.sectionRange(".text")).toEqual({ offset: parseInt(offset!, 16), size: parseInt(size!, 16) });
    expect(elf.sectionRange(".tex")).toBeUndefined();
    expect(elf.sectionRange(".bun")).toBeUndefined();
  });

  test("a stripped binary keeps only .dynsym (no local functions); non-ELF input is a typed error", () => {
    using elf = new ElfFile(stripped);
    expect(elf.symbols().lookup(nm(bin, "burn_cpu_in_known_function"))).toBeUndefined();
    const txt = join(dir, "not-elf");
    writeFileSync(txt, "x".repeat(100));
    expect(() => new ElfFile(txt)).toThrow(ElfError);
  });
});

describe("Symbolizer over a fake /proc", () => {
  test("user addresses resolve through the mapped file (process root), symbols are shared by build id", () => {
    const proc = join(dir, "proc");
    const textOffset = (() => {
      using elf = new ElfFile(bin);
      return elf.info.segments.find((s) => s.fileOffset > 0 && s.vaddr === s.fileOffset)?.fileOffset ?? 0x1000;
    })();
    const base = 0x555555554000;
    for (const pid of [101, 102]) {
      mkdirSync(join(proc, `${pid}/root/opt/app`), { recursive: true });
      copyFileSync(bin, join(proc, `${pid}/root/opt/app/prog`));
      writeFileSync(
        join(proc, `${pid}/maps`),
        `${(base + textOffset).toString(16)}-${(base + textOffset + 0x1000).toString(16)} r-xp ${textOffset.toString(16).padStart(8, "0")} fe:00 1 /opt/app/prog\n`,
      );
    }
    const s = new Symbolizer({ procRoot: proc, kallsyms: join(dir, "none") });
    const burn = base + nm(bin, "burn_cpu_in_known_function") + 4;
    const ret = base + nm(bin, "main") + 1;
    const frames = s.userFrames(101, [burn, ret]);
    expect(frames.map((f) => f.function)).toEqual(["burn_cpu_in_known_function", "main"]);
    expect(frames[0]!.binary).toBe("/opt/app/prog");
    expect(s.userFrames(102, [burn])[0]!.function).toBe("burn_cpu_in_known_function");
    // Another process mapping the same binary gets the same frame object (the exporter interns frames by object).
    expect(s.userFrames(102, [burn])[0]).toBe(frames[0]!);
    expect(s.stats.binariesLoaded).toBe(1);
    const unknown = s.userFrames(101, [0x1234]);
    expect(unknown[0]!.function).toBe("[unknown] 0x1234");
  });

  test("frames stay cached (same objects) while only data mappings change; a changed code mapping resolves again", () => {
    const proc = join(dir, "proc-remap");
    mkdirSync(join(proc, "103/root/opt/app"), { recursive: true });
    copyFileSync(bin, join(proc, "103/root/opt/app/prog"));
    const textOffset = (() => {
      using elf = new ElfFile(bin);
      return elf.info.segments.find((s) => s.fileOffset > 0 && s.vaddr === s.fileOffset)?.fileOffset ?? 0x1000;
    })();
    const code = (base: number) =>
      `${(base + textOffset).toString(16)}-${(base + textOffset + 0x1000).toString(16)} r-xp ${textOffset.toString(16).padStart(8, "0")} fe:00 1 /opt/app/prog\n`;
    const base = 0x555555554000;
    const maps = join(proc, "103/maps");
    writeFileSync(maps, code(base));
    const s = new Symbolizer({ procRoot: proc, kallsyms: join(dir, "none") });
    const burn = base + nm(bin, "burn_cpu_in_known_function") + 4;
    const first = s.userFrames(103, [burn])[0]!;
    expect(first.function).toBe("burn_cpu_in_known_function");
    // The heap grows (a new anonymous rw mapping) and the maps are read again (periodic recheck): same frame object.
    writeFileSync(maps, `${code(base)}7f0000000000-7f0000100000 rw-p 00000000 00:00 0\n`);
    for (let i = 0; i < 7; i++) s.beginPeriod();
    expect(s.userFrames(103, [burn])[0]).toBe(first);
    // An address not seen yet inside the known code mapping resolves without dropping the cache.
    const main = base + nm(bin, "main") + 1;
    expect(s.userFrames(103, [main])[0]!.function).toBe("main");
    expect(s.userFrames(103, [burn])[0]).toBe(first);
    // The code moves (another base): the old address no longer resolves, the new one does, in a new object.
    const moved = 0x565555554000;
    writeFileSync(maps, code(moved));
    for (let i = 0; i < 7; i++) s.beginPeriod();
    expect(s.userFrames(103, [burn])[0]!.function).toBe(`[unknown] 0x${burn.toString(16)}`);
    const again = s.userFrames(103, [moved + nm(bin, "burn_cpu_in_known_function") + 4])[0]!;
    expect(again.function).toBe("burn_cpu_in_known_function");
    // Same binary, same virtual address: the one frame object of that binary (shared by processes and mappings).
    expect(again).toBe(first);
  });
});
