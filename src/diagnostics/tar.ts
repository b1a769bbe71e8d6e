/**
 * A minimal POSIX ustar writer (regular files and directories), gzipped: enough for a diagnostics bundle that
 * `tar -xzf` unpacks. Names longer than 100 bytes are split into prefix/name as ustar allows.
 */
import { gzipSync } from "node:zlib";

const BLOCK_BYTES = 512;

export interface TarEntry {
  /** Path inside the archive; a trailing "/" makes a directory. */
  name: string;
  data?: Uint8Array | string;
  /** Permission bits (default 0644 for files, 0755 for directories). */
  mode?: number;
  mtime?: Date;
}

export class TarNameError extends Error {
  constructor(name: string) {
    super(`tar entry name too long for ustar: ${name}`);
    this.name = "TarNameError";
  }
}

const encoder = new TextEncoder();

function writeString(buf: Uint8Array, offset: number, length: number, s: string): void {
  const bytes = encoder.encode(s);
  buf.set(bytes.subarray(0, length), offset);
}

function writeOctal(buf: Uint8Array, offset: number, length: number, value: number): void {
  writeString(buf, offset, length, value.toString(8).padStart(length - 1, "0") + "\0");
}

function splitName(name: string): { prefix: string; name: string } {
  if (encoder.encode(name).length <= 100) return { prefix: "", name };
  for (let i = name.indexOf("/"); i !== -1; i = name.indexOf("/", i + 1)) {
    const prefix = name.slice(0, i);
    const rest = name.slice(i + 1);
    if (encoder.encode(prefix).length <= 155 && encoder.encode(rest).length <= 100) return { prefix, name: rest };
  }
  throw new TarNameError(name);
}

function header(entry: TarEntry, size: number): Uint8Array {
  const h = new Uint8Array(BLOCK_BYTES);
  const dir = entry.name.endsWith("/");
  const { prefix, name } = splitName(entry.name);
  writeString(h, 0, 100, name);
  writeOctal(h, 100, 8, entry.mode ?? (dir ? 0o755 : 0o644));
  writeOctal(h, 108, 8, 0);
  writeOctal(h, 116, 8, 0);
  writeOctal(h, 124, 12, size);
  writeOctal(h, 136, 12, Math.floor((entry.mtime ?? new Date()).getTime() / 1000));
  h.fill(0x20, 148, 156); // checksum field counts as spaces while summing
  h[156] = dir ? 0x35 : 0x30; // '5' directory, '0' file
  writeString(h, 257, 6, "ustar\0");
  writeString(h, 263, 2, "00");
  writeString(h, 265, 32, "root");
  writeString(h, 297, 32, "root");
  writeString(h, 345, 155, prefix);
  let sum = 0;
  for (const b of h) sum += b;
  writeString(h, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
  return h;
}

/** The uncompressed archive. */
export function tar(entries: readonly TarEntry[]): Uint8Array {
  const parts: Uint8Array[] = [];
  let total = 0;
  for (const e of entries) {
    const data = e.data === undefined ? new Uint8Array() : typeof e.data === "string" ? encoder.encode(e.data) : e.data;
    const size = e.name.endsWith("/") ? 0 : data.length;
    parts.push(header(e, size));
    total += BLOCK_BYTES;
    if (size > 0) {
      const padded = new Uint8Array(Math.ceil(size / BLOCK_BYTES) * BLOCK_BYTES);
      padded.set(data);
      parts.push(padded);
      total += padded.length;
    }
  }
  parts.push(new Uint8Array(BLOCK_BYTES * 2));
  total += BLOCK_BYTES * 2;
  const out = new Uint8Array(total);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/** The archive, gzipped (.tar.gz). */
export function tarGz(entries: readonly TarEntry[]): Uint8Array {
  return gzipSync(tar(entries));
}
