import { describe, expect, test } from "bun:test";
import { readFileSync, readlinkSync } from "node:fs";
import { filePageRuns, releasableMappings, releaseExecutablePages, writableRanges } from "../../../ffi/resident";

const EXE = "/opt/svc-agent";

/** One smaps entry: the head line and the fields the selection reads. */
function entry(range: string, perms: string, name: string, rssKb: number, anonymousKb: number): string {
  return [`${range} ${perms} 00000000 fd:01 123 ${name}`.trimEnd(), `Size: 100 kB`, `Rss: ${rssKb} kB`, `Pss: ${rssKb} kB`, `Anonymous: ${anonymousKb} kB`, `VmFlags: rd mr mw me`].join("\n");
}

describe("releasableMappings", () => {
  test("only the executable's read-only mappings with resident pages and no written page", () => {
    const smaps = [
      entry("00200000-01a39000", "r--p", EXE, 7908, 0), // constant data: released
      entry("01a40000-0684a000", "r-xp", EXE, 38568, 0), // code: released
      entry("0684a000-0685f000", "rw-p", EXE, 84, 48), // writable data: kept
      entry("0685f000-06867000", "r--p", EXE, 32, 12), // read-only now, written before (copied on write): kept
      entry("06867000-07c9e000", "rw-p", EXE, 12140, 948), // the bundle's writable mapping: kept
      entry("07d00000-07d01000", "r--p", EXE, 0, 0), // nothing resident: skipped
      entry("7f0000000000-7f0000100000", "r-xp", "/usr/lib/x86_64-linux-gnu/libc.so.6", 1176, 0), // another file: kept
      entry("7f1000000000-7f1000400000", "rw-p", "", 4000, 4000), // anonymous: kept
    ].join("\n");
    expect(releasableMappings(smaps, EXE)).toEqual([
      { start: 0x200000n, end: 0x1a39000n, rss: 7908 * 1024 },
      { start: 0x1a40000n, end: 0x684a000n, rss: 38568 * 1024 },
    ]);
  });

  test("a mapping whose Anonymous line is missing is not released", () => {
    const smaps = `01a40000-0684a000 r-xp 01838000 fd:01 123 ${EXE}\nRss: 100 kB\n`;
    expect(releasableMappings(smaps, EXE)).toEqual([]);
  });
});

describe("the embedded bundle's pages", () => {
  const smaps = [
    entry("00200000-01a39000", "r--p", EXE, 7908, 0),
    entry("0684a000-0685f000", "rw-p", EXE, 84, 48).replace(" 00000000 ", " 06641000 "),
    entry("06867000-07c2f000", "rw-p", EXE, 6688, 116).replace(" 00000000 ", " 0665e000 "),
    entry("7f1000000000-7f1000400000", "rw-p", "", 4000, 4000),
  ].join("\n");

  test("writableRanges: the whole pages of the writable mappings that hold the file range, by file offset", () => {
    // The section at file offset 0x6819000..0x7a25920 (ends inside a page): mapped from 0x06867000 + (0x6819000 - 0x665e000).
    expect(writableRanges(smaps, EXE, { offset: 0x6819000, size: 0x120c920 })).toEqual([{ start: 0x6a22000n, end: 0x7c2e000n, rss: 0 }]);
    // A range starting inside a page starts at the next one; one in no writable mapping gives nothing.
    expect(writableRanges(smaps, EXE, { offset: 0x6819010, size: 0x3000 })).toEqual([{ start: 0x6a23000n, end: 0x6a25000n, rss: 0 }]);
    expect(writableRanges(smaps, EXE, { offset: 0x100000, size: 0x10000 })).toEqual([]);
  });

  test("filePageRuns: runs of present pages that are still the file's; written (anonymous), swapped and absent pages split them", () => {
    const present = 1n << 63n;
    const swapped = 1n << 62n;
    const file = 1n << 61n;
    const entries = BigUint64Array.of(present | file, present | file | 123n, present, 0n, present | file, swapped | file, present | file, present | file);
    expect(filePageRuns(entries, 0x1000n)).toEqual([
      { start: 0x1000n, end: 0x3000n, rss: 8192 },
      { start: 0x5000n, end: 0x6000n, rss: 4096 },
      { start: 0x7000n, end: 0x9000n, rss: 8192 },
    ]);
    expect(filePageRuns(new BigUint64Array(0), 0x1000n)).toEqual([]);
  });
});

describe("releaseExecutablePages on this process", () => {
  test("unmaps the resident pages of the running executable's read-only mappings and the process runs on", () => {
    const exe = readlinkSync("/proc/self/exe");
    const before = releasableMappings(readFileSync("/proc/self/smaps", "utf8"), exe);
    expect(before.length).toBeGreaterThan(0);
    const released = releaseExecutablePages(process.env);
    expect(released.readOnly).toBeGreaterThan(0);
    expect(released.bundle).toBe(0);
    // The mappings stay; most of their pages are gone from the resident set, the ones the code still runs fault
    // back in from the page cache.
    const after = readFileSync("/proc/self/smaps", "utf8");
    expect(after).toContain(exe);
    const residentBefore = before.reduce((s, m) => s + m.rss, 0);
    const residentAfter = releasableMappings(after, exe).reduce((s, m) => s + m.rss, 0);
    expect(residentAfter).toBeLessThan(residentBefore / 2);
    expect(JSON.stringify({ ok: [1, 2, 3].map((x) => x * 2) })).toBe('{"ok":[2,4,6]}');
  });
});
