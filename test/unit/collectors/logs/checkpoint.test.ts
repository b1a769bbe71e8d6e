/** The log checkpoint file (src/collectors/logs/checkpoint.ts): round trip, per-stream offsets, corrupt files. */
import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CheckpointError, readCheckpoint, writeCheckpoint } from "../../../../src/collectors/logs/checkpoint";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function file(): string {
  const d = mkdtempSync(join(tmpdir(), "svc-logs-cp-"));
  dirs.push(d);
  return join(d, "state/cp.json");
}

test("entries round-trip, with per-stream offsets where they were given; an absent file is empty", () => {
  const path = file();
  expect(readCheckpoint(path).size).toBe(0);
  const a = { path: "/l/a.log", key: "1:2", offset: 10, head: "aGk=" };
  const b = { path: "/l/b.log", key: "1:3", offset: 0, head: "", streams: { stdout: 40, none: 55 } };
  writeCheckpoint(path, [a, b]);
  expect([...readCheckpoint(path).values()]).toEqual([a, b]);
});

test("a bad per-stream offset makes the file corrupt, named", () => {
  const path = file();
  writeCheckpoint(path, []);
  writeFileSync(path, JSON.stringify({ version: 1, files: [{ path: "/l/a.log", key: "1:2", offset: 1, head: "", streams: { stdout: -1 } }] }));
  expect(() => readCheckpoint(path)).toThrow(CheckpointError);
  expect(() => readCheckpoint(path)).toThrow(`checkpoint file ${path}: bad entry`);
});
