import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { configReferenceMarkdown, configRows } from "../../../src/config/reference";

test("every configuration key has a description", () => {
  const missing = configRows().filter((r) => r.meaning.trim() === "").map((r) => r.key);
  expect(missing).toEqual([]);
});

test("the README's configuration reference is the one the schemas generate", () => {
  const readme = readFileSync(join(import.meta.dir, "../../../README.md"), "utf8");
  const start = readme.indexOf("<!-- config-reference:start -->");
  const end = readme.indexOf("<!-- config-reference:end -->");
  expect(start).toBeGreaterThan(-1);
  expect(end).toBeGreaterThan(start);
  const inReadme = readme.slice(start + "<!-- config-reference:start -->".length, end).trim();
  // Regenerate with: bun run docs:config
  expect(inReadme).toBe(configReferenceMarkdown().trim());
});
