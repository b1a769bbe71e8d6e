/** The bundle's tar writer against the system tar: listing, long names, contents. */
import { expect, test } from "bun:test";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { tarGz } from "../../../src/diagnostics/tar";

test("system tar lists and extracts what the writer wrote, long names included", async () => {
  const dir = mkdtempSync(join(tmpdir(), "svc-tar-"));
  const long = `root/${"d".repeat(80)}/${"f".repeat(90)}.json`;
  const big = "x".repeat(70_000);
  writeFileSync(join(dir, "a.tar.gz"), await tarGz([{ name: "root/" }, { name: "root/a.txt", data: "hello\n" }, { name: long, data: big }, { name: "root/empty.txt", data: "" }]));
  const list = Bun.spawnSync(["tar", "-tzf", join(dir, "a.tar.gz")]);
  expect(list.exitCode).toBe(0);
  expect(list.stdout.toString().trim().split("\n")).toEqual(["root/", "root/a.txt", long, "root/empty.txt"]);
  const x = Bun.spawnSync(["tar", "-xzf", join(dir, "a.tar.gz"), "-C", dir]);
  expect(x.exitCode).toBe(0);
  expect(readFileSync(join(dir, "root/a.txt"), "utf8")).toBe("hello\n");
  expect(readFileSync(join(dir, long), "utf8")).toBe(big);
  expect(readFileSync(join(dir, "root/empty.txt"), "utf8")).toBe("");
});
