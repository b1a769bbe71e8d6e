import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { STATIC_MIN_BYTES, staticVerdict, tlsFunctionsIn, versionMarkerIn } from "../../../../src/collectors/tls/targets";

const dir = mkdtempSync(join(tmpdir(), "svc-tls-targets-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("static OpenSSL detection", () => {
  test("a version marker is found across the scan's chunk boundary", () => {
    const f = join(dir, "blob");
    const chunk = 4 * 1024 * 1024;
    const bytes = new Uint8Array(chunk + 64);
    bytes.set(new TextEncoder().encode("OpenSSL 1.1.1w  11 Sep 2023"), chunk - 5);
    writeFileSync(f, bytes);
    expect(versionMarkerIn(f)).toBe("OpenSSL 1.1.1w");
    writeFileSync(f, new Uint8Array(1000));
    expect(versionMarkerIn(f)).toBeUndefined();
  });

  test("a small executable is not searched; a large non-ELF file is no target", () => {
    expect(staticVerdict("/nonexistent", STATIC_MIN_BYTES - 1)).toEqual({ kind: "none" });
    const f = join(dir, "big");
    writeFileSync(f, new Uint8Array(STATIC_MIN_BYTES));
    expect(staticVerdict(f, STATIC_MIN_BYTES)).toEqual({ kind: "none" });
  });

  test.skipIf(!existsSync("/usr/bin/python3"))("python3 links libssl dynamically: no static target", () => {
    expect(tlsFunctionsIn("/usr/bin/python3")).toEqual([]);
    expect(staticVerdict("/usr/bin/python3", statSync("/usr/bin/python3").size).kind).toBe("none");
  });

  test("Bun (the test runner) carries BoringSSL without symbols: not traceable, with the reason", () => {
    const v = staticVerdict(process.execPath, statSync(process.execPath).size);
    expect(v).toEqual({ kind: "no_symbols", reason: "BoringSSL linked statically without SSL_read/SSL_write symbols (stripped): not traceable" });
  });
});
