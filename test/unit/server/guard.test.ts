import { describe, expect, test } from "bun:test";
import { TokenChecker } from "../../../src/server/auth";
import { canonicalPath } from "../../../src/server/guard";
import { RateLimiter } from "../../../src/server/rate-limit";

describe("token checker", () => {
  const t = new TokenChecker("s3cret-token", ["reader-token"]);
  test.each([
    [null, "none"],
    ["", "none"],
    ["Bearer s3cret-token", "full"],
    ["Bearer reader-token", "read_only"],
    // The scheme is case-insensitive (RFC 7235 section 2.1); the token is not.
    ["bearer s3cret-token", "full"],
    ["BEARER s3cret-token", "full"],
    ["bEaReR reader-token", "read_only"],
    ["bearer S3CRET-TOKEN", "none"],
    ["bearer  s3cret-token", "none"],
    ["bearers3cret-token", "none"],
    ["Bearer", "none"],
    ["Bearer ", "none"],
    ["Bearer S3CRET-TOKEN", "none"],
    ["Bearer  s3cret-token", "none"],
    ["Bearer s3cret-token ", "none"],
    [" Bearer s3cret-token", "none"],
    ["Basic s3cret-token", "none"],
    ["s3cret-token", "none"],
    ["Bearer s3cret-tokenX", "none"],
  ] as const)("%p grants %s", (header, access) => expect(t.check(header).access).toBe(access));
});

describe("rate limiter", () => {
  test("allows one second's worth as a burst, then the refill rate", () => {
    let now = 0;
    const r = new RateLimiter(10, false, () => now);
    let ok = 0;
    for (let i = 0; i < 50; i++) if (r.allow("a")) ok++;
    expect(ok).toBe(10);
    now += 500;
    ok = 0;
    for (let i = 0; i < 50; i++) if (r.allow("b")) ok++;
    expect(ok).toBe(5);
    expect(r.refused).toBe(85);
  });

  test("per client: each address has its own bucket", () => {
    const now = 0;
    const r = new RateLimiter(2, true, () => now);
    expect([r.allow("a"), r.allow("a"), r.allow("a")]).toEqual([true, true, false]);
    expect([r.allow("b"), r.allow("b"), r.allow("b")]).toEqual([true, true, false]);
  });

  test("at 10x the rate, the accepted rate stays at the limit", () => {
    let now = 0;
    const r = new RateLimiter(100, false, () => now);
    let ok = 0;
    for (let i = 0; i < 10_000; i++) {
      now += 1; // 1000 requests per second for 10 seconds
      if (r.allow("a")) ok++;
    }
    // 10 s at 100/s plus the initial burst of 100
    expect(ok).toBeGreaterThanOrEqual(1000);
    expect(ok).toBeLessThanOrEqual(1100);
  });
});

test("canonical paths strip the /api/v1 prefix", () => {
  expect(canonicalPath("/api/v1/status")).toBe("/status");
  expect(canonicalPath("/api/v1")).toBe("/");
  expect(canonicalPath("/api/v10/status")).toBe("/api/v10/status");
  expect(canonicalPath("/healthz")).toBe("/healthz");
});

test("pathOf extracts the path of a request URL like URL.pathname does", async () => {
  const { pathOf } = await import("../../../src/server/guard");
  for (const u of ["http://h/healthz", "http://h:19090/status/ebpf?x=1", "http://h", "http://h/a#b", "http://h/a?b#c", "http://[::1]:80/x/y?z"])
    expect(pathOf(u)).toBe(new URL(u).pathname);
});
