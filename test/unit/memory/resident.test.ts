import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { residentReader } from "../../../src/memory/resident";

const dir = mkdtempSync(join(tmpdir(), "svc-statm-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("resident bytes from /proc/self/statm", () => {
  test("the second field in pages, read again on every call from the same descriptor", () => {
    const path = join(dir, "statm");
    writeFileSync(path, "52340 17408 6144 2870 0 21000 0\n");
    const read = residentReader({ path, pageBytes: 4096 });
    expect(read()).toBe(17408 * 4096);
    writeFileSync(path, "52340 9 6144 2870 0 21000 0\n");
    expect(read()).toBe(9 * 4096);
  });

  test("this process: what process.memoryUsage.rss() says, give or take what moved between the two reads", () => {
    const read = residentReader();
    const ours = read();
    const bun = process.memoryUsage.rss();
    expect(Math.abs(ours - bun)).toBeLessThan(4 * 1024 * 1024);
    expect(ours % 4096).toBe(0);
  });

  test("a file that cannot be read or parsed: process.memoryUsage.rss() instead", () => {
    const missing = residentReader({ path: join(dir, "missing"), pageBytes: 4096 });
    expect(missing()).toBeGreaterThan(1024 * 1024);
    const garbled = join(dir, "garbled");
    writeFileSync(garbled, "nonsense");
    expect(residentReader({ path: garbled, pageBytes: 4096 })()).toBeGreaterThan(1024 * 1024);
  });
});
