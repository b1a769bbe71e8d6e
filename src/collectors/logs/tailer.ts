/**
 * One tailed file, known by device and inode: reads what was appended since the last read and splits it into
 * lines with the byte offset at which each ends. Notices truncation (the size fell below the read offset:
 * copytruncate rotation) and starts again from the beginning. A renamed file keeps being read through its open
 * descriptor until it is drained (the collector decides when, see `draining`).
 */
import { closeSync, fstatSync, openSync, readSync, statSync } from "node:fs";

/** Bytes at the start of a file that identify it in the checkpoint. */
export const FINGERPRINT_BYTES = 64;

/**
 * A complete line: its text (without the newline), its start offset, the offset just after it, and whether it was
 * cut at max_line_size. Returning false stops the read after this line (the rest is read again next time).
 */
export type LineHandler = (text: string, startOffset: number, endOffset: number, truncated: boolean) => boolean;

/** `<dev>:<ino>` of a path (following symlinks), or undefined when it does not exist. */
export function fileKey(path: string): string | undefined {
  try {
    const s = statSync(path, { bigint: true });
    return s.isFile() ? `${s.dev}:${s.ino}` : undefined;
  } catch {
    return undefined;
  }
}

export class FileTailer {
  /** `<dev>:<ino>`. */
  readonly key: string;
  /** The path it was found under first (attributes and checkpoint use it). */
  readonly path: string;
  /** Increases on every truncation: offsets of an older generation no longer mean anything. */
  generation = 0;
  /** Offset after the last line whose record the pipeline accepted (what the checkpoint stores). */
  committed: number;
  /** Per-stream offsets past `committed` that go with it (see CheckpointEntry.streams). */
  committedStreams: Record<string, number> | undefined;
  /** The file no longer sits at its path (renamed or deleted): read to the end, then close. */
  draining = false;
  /** Polls in a row that found nothing new while draining. */
  idlePolls = 0;
  #fd: number | undefined;
  #offset: number;
  #carry: Buffer | undefined;
  #skipping = false;
  readonly #maxLineBytes: number;

  /** Opens `path` (whose key is `key`) and reads from `offset`. Throws the open error (ENOENT, EACCES). */
  constructor(path: string, key: string, offset: number, maxLineBytes: number) {
    this.path = path;
    this.key = key;
    this.#fd = openSync(path, "r");
    this.#offset = offset;
    this.committed = offset;
    this.#maxLineBytes = maxLineBytes;
  }

  /** Offset of the next byte to read. */
  get offset(): number {
    return this.#offset;
  }

  get closed(): boolean {
    return this.#fd === undefined;
  }

  /** Current size of the open file (0 once closed). */
  size(): number {
    return this.#fd === undefined ? 0 : fstatSync(this.#fd).size;
  }

  /** The first bytes of the file, base64 (checkpoint fingerprint). */
  head(): string {
    if (this.#fd === undefined) return "";
    const b = Buffer.alloc(FINGERPRINT_BYTES);
    const n = readSync(this.#fd, b, 0, FINGERPRINT_BYTES, 0);
    return b.subarray(0, n).toString("base64");
  }

  /**
   * Reads at most `maxBytes` appended bytes through `buf` (a scratch buffer shared by tailers) and calls
   * `onLine` for every complete line. Returns the bytes read, or -1 when the file was found truncated (then
   * reading starts again at offset 0 on the next call and `generation` has increased).
   */
  read(buf: Buffer, maxBytes: number, onLine: LineHandler): number {
    if (this.#fd === undefined) return 0;
    const size = fstatSync(this.#fd).size;
    if (size < this.#offset) {
      this.#offset = 0;
      this.committed = 0;
      this.committedStreams = undefined;
      this.#carry = undefined;
      this.#skipping = false;
      this.generation++;
      return -1;
    }
    let total = 0;
    while (total < maxBytes && this.#offset < size) {
      const want = Math.min(buf.length, maxBytes - total, size - this.#offset);
      const n = readSync(this.#fd, buf, 0, want, this.#offset);
      if (n <= 0) break;
      const stoppedAt = this.#split(buf, n, onLine);
      if (stoppedAt >= 0) {
        total += stoppedAt - this.#offset;
        this.#offset = stoppedAt;
        break;
      }
      this.#offset += n;
      total += n;
    }
    return total;
  }

  /** Splits a chunk into lines; returns -1 when all of it was taken, else the offset after the line onLine stopped at. */
  #split(chunk: Buffer, n: number, onLine: LineHandler): number {
    let data = chunk.subarray(0, n);
    let base = this.#offset;
    if (this.#carry) {
      base -= this.#carry.length;
      data = Buffer.concat([this.#carry, data]);
      this.#carry = undefined;
    }
    let start = 0;
    for (let nl = data.indexOf(10, start); nl !== -1; nl = data.indexOf(10, start)) {
      if (this.#skipping) this.#skipping = false;
      else {
        const end = nl > start && data[nl - 1] === 13 ? nl - 1 : nl;
        const cut = end - start > this.#maxLineBytes;
        if (!onLine(data.toString("utf8", start, cut ? start + this.#maxLineBytes : end), base + start, base + nl + 1, cut)) {
          this.#carry = undefined;
          return base + nl + 1;
        }
      }
      start = nl + 1;
    }
    if (start >= data.length || this.#skipping) return -1;
    if (data.length - start > this.#maxLineBytes) {
      // An over-long line without its end yet: emit what max_line_size allows and discard the rest up to the newline.
      onLine(data.toString("utf8", start, start + this.#maxLineBytes), base + start, base + data.length, true);
      this.#skipping = true;
      return -1;
    }
    this.#carry = Buffer.from(data.subarray(start));
    return -1;
  }

  /** Closes the descriptor. Idempotent. */
  close(): void {
    if (this.#fd !== undefined) closeSync(this.#fd);
    this.#fd = undefined;
  }
}
