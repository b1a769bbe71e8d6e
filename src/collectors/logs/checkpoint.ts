/**
 * The checkpoint file: where each tailed file was read up to, so that a restart neither loses nor repeats lines.
 * A file is known by its device and inode (a rename keeps them) and by the first bytes it held (an inode number
 * reused by a new file does not match). Written atomically: a temporary file, fsync, rename.
 */
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, writeSync } from "node:fs";
import { dirname } from "node:path";

const CHECKPOINT_VERSION = 1;

export interface CheckpointEntry {
  /** The path the file was tailed under (for operators, and to find it again after a rotation while stopped). */
  path: string;
  /** `<dev>:<ino>` of the file. */
  key: string;
  /** Byte offset after the last line handed to the export pipeline. */
  offset: number;
  /** Base64 of the first bytes of the file (up to FINGERPRINT_BYTES), "" while the file was empty. */
  head: string;
  /**
   * Per stream (`stdout`, `stderr`, `none`), where that stream's lines stop being sent already, when it is past
   * `offset`: a record in progress on one stream holds `offset` back while other streams' records go out, and
   * their lines between the two are skipped when the file is read again from `offset`.
   */
  streams?: Record<string, number>;
}

/** Thrown when the checkpoint file exists but cannot be read as one. */
export class CheckpointError extends Error {
  override readonly name = "CheckpointError";
  constructor(readonly path: string, detail: string) {
    super(`checkpoint file ${path}: ${detail}`);
  }
}

/** Reads the checkpoint; an absent file is an empty checkpoint. Throws CheckpointError when it is corrupt. */
export function readCheckpoint(path: string): Map<string, CheckpointEntry> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return new Map();
    throw new CheckpointError(path, (e as Error).message);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new CheckpointError(path, `not JSON: ${(e as Error).message}`);
  }
  const d = doc as { version?: unknown; files?: unknown };
  if (d.version !== CHECKPOINT_VERSION || !Array.isArray(d.files)) throw new CheckpointError(path, `expected {"version":1,"files":[...]}`);
  const out = new Map<string, CheckpointEntry>();
  for (const f of d.files as Array<Record<string, unknown>>) {
    if (typeof f.path !== "string" || typeof f.key !== "string" || !Number.isSafeInteger(f.offset) || typeof f.head !== "string" || !validStreams(f.streams))
      throw new CheckpointError(path, `bad entry ${JSON.stringify(f)}`);
    const entry: CheckpointEntry = { path: f.path, key: f.key, offset: f.offset as number, head: f.head };
    if (f.streams) entry.streams = f.streams as Record<string, number>;
    out.set(f.key, entry);
  }
  return out;
}

function validStreams(v: unknown): boolean {
  if (v === undefined) return true;
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  return Object.values(v).every((n) => Number.isSafeInteger(n) && (n as number) >= 0);
}

/** Replaces the checkpoint atomically (creating its directory). */
export function writeCheckpoint(path: string, entries: Iterable<CheckpointEntry>): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.tmp-${process.pid}`;
  const body = JSON.stringify({ version: CHECKPOINT_VERSION, files: [...entries] });
  const fd = openSync(tmp, "w", 0o600);
  try {
    writeSync(fd, body);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
}
