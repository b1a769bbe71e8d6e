import { describe, expect, test } from "bun:test";
import { formatDuration, parseDuration, parseSize } from "../../../src/config/units";

describe("durations", () => {
  test.each([
    ["500ms", 500],
    ["1s", 1000],
    ["2m", 120_000],
    ["1h30m", 5_400_000],
    ["1.5s", 1500],
    ["250us", 0.25],
    ["0", 0],
  ])("%s is %d ms", (text, ms) => expect(parseDuration(text)).toBe(ms));

  test.each(["", "5", "5x", "s", "1s2", "-1s", "1 s", "ms500"])("%p is not a duration", (text) =>
    expect(parseDuration(text)).toBeUndefined(),
  );

  test("formats back the way operators write them", () => {
    expect(formatDuration(120_000)).toBe("2m");
    expect(formatDuration(1500)).toBe("1500ms");
    expect(formatDuration(3_600_000)).toBe("1h");
  });
});

describe("sizes", () => {
  test.each([
    ["64MiB", 64 * 1024 * 1024],
    ["16777216", 16777216],
    [16777216, 16777216],
    ["1GiB", 1024 ** 3],
    ["4KiB", 4096],
    ["2MB", 2_000_000],
    ["10 kb", 10_000],
  ] as const)("%p is %d bytes", (text, bytes) => expect(parseSize(text)).toBe(bytes));

  test.each(["12QB", "", "MiB", "-5", "1.5.2MiB"])("%p is not a size", (text) => expect(parseSize(text)).toBeUndefined());
  test("negative and fractional integers are refused", () => {
    expect(parseSize(-1)).toBeUndefined();
    expect(parseSize(1.5)).toBeUndefined();
  });
});
