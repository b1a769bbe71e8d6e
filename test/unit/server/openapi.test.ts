/** The document's patterns for durations and sizes accept exactly what the configuration loader parses. */
import { describe, expect, test } from "bun:test";
import { parseDuration, parseSize } from "../../../src/config/units";
import { DURATION_PATTERN, SIZE_PATTERN } from "../../../src/server/routes/openapi";

// JSON Schema patterns are ECMA-262 regular expressions; validators compile them with the "u" flag.
const duration = new RegExp(DURATION_PATTERN, "u");
const size = new RegExp(SIZE_PATTERN, "u");

describe("duration pattern", () => {
  test.each(["0", "10s", "500ms", "1h30m", "1.5s", "250us", "250µs", "10ns", " 2m ", "1h2m3s4ms", "PT10S", "10", "s", "", "1d", "-1s", "1.s", "10 s", "1h 30m"])(
    "%p: pattern agrees with parseDuration",
    (v) => expect(duration.test(v)).toBe(parseDuration(v) !== undefined),
  );
});

describe("size pattern", () => {
  test.each(["64MiB", "16777216", "1.5GB", "512", "1k", "1KB", "1kib", "2g", " 3 MiB ", "1b", "lots", "1TB", "1 k b", "", "-1", "1.5.5MB", "10Mi", "1e6"])(
    "%p: pattern agrees with parseSize",
    (v) => expect(size.test(v)).toBe(parseSize(v) !== undefined),
  );
});
