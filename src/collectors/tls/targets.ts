/**
 * Where TLS libraries live: the OpenSSL/BoringSSL shared libraries a process has mapped (/proc/<pid>/maps), or an
 * executable with OpenSSL linked in statically. A target is one file (device and inode): uprobes on a file apply
 * to every process that maps it, so each file is attached once, whatever the number of processes. A static
 * executable whose SSL_* symbols are present is a target; one that carries an OpenSSL/BoringSSL version string
 * but no symbols cannot be traced and is reported with that reason.
 */
import { closeSync, openSync, readdirSync, readFileSync, readlinkSync, readSync, statSync } from "node:fs";
import { ElfFile } from "../profiling/elf";

/** The functions whose entry and return are probed; SSL_read and SSL_write must be present. */
export const TLS_FUNCTIONS = ["SSL_write", "SSL_write_ex", "SSL_read", "SSL_read_ex"] as const;
export type TlsFunction = (typeof TLS_FUNCTIONS)[number];
const REQUIRED_FUNCTIONS: readonly TlsFunction[] = ["SSL_read", "SSL_write"];
/** Shared libraries probed: OpenSSL 1.1/3 and BoringSSL's libssl. */
const LIBSSL_RE = /\/libssl\.so(\.[0-9.]+)?$/;
/** Executables smaller than this are not searched for a static OpenSSL (one weighs megabytes). */
export const STATIC_MIN_BYTES = 2 * 1024 * 1024;
/** Executables larger than this are not searched for a version string. */
const STATIC_SCAN_MAX_BYTES = 512 * 1024 * 1024;
const SCAN_CHUNK_BYTES = 4 * 1024 * 1024;
const VERSION_MARKERS = ["OpenSSL 1.1.", "OpenSSL 3.", "BoringSSL"].map((s) => Buffer.from(s));

/** A file mapped by a process, as /proc/<pid>/maps names it. */
export interface MappedFile {
  /** "major:minor:inode" (hex device as in maps, decimal inode): the file's identity. */
  key: string;
  /** Path inside the process's mount namespace. */
  path: string;
}

/** The libssl files in the text of /proc/<pid>/maps (each once). */
export function libsslInMaps(text: string): MappedFile[] {
  const out = new Map<string, MappedFile>();
  for (const line of text.split("\n")) {
    const slash = line.indexOf("/");
    if (slash < 0) continue;
    const path = line.slice(slash);
    if (!LIBSSL_RE.test(path)) continue;
    const f = line.slice(0, slash).trim().split(/\s+/);
    if (f.length < 5 || f[4] === "0") continue;
    const key = `${f[3]}:${f[4]}`;
    if (!out.has(key)) out.set(key, { key, path });
  }
  return [...out.values()];
}

/** The file key of a stat (device as maps writes it: hex major:minor). */
export function statKey(dev: number, ino: number): string {
  const major = Math.floor(dev / 256) & 0xfff;
  const minor = (dev & 0xff) | (Math.floor(dev / 4096) & 0xfff00);
  return `${major.toString(16).padStart(2, "0")}:${minor.toString(16).padStart(2, "0")}:${ino}`;
}

export type StaticVerdict =
  | { kind: "symbols"; functions: TlsFunction[] }
  | { kind: "no_symbols"; reason: string }
  | { kind: "none" };

/** Which of TLS_FUNCTIONS an ELF file defines (from .symtab and .dynsym). */
export function tlsFunctionsIn(path: string): TlsFunction[] {
  using elf = new ElfFile(path);
  const found = elf.functionSymbols(TLS_FUNCTIONS);
  return TLS_FUNCTIONS.filter((f) => found.has(f));
}

/** The first OpenSSL/BoringSSL version marker in a file, read in chunks (undefined when none). */
export function versionMarkerIn(path: string): string | undefined {
  const fd = openSync(path, "r");
  try {
    const longest = Math.max(...VERSION_MARKERS.map((m) => m.length));
    const buf = Buffer.alloc(SCAN_CHUNK_BYTES + longest);
    let pos = 0;
    let carry = 0;
    for (;;) {
      const n = readSync(fd, buf, carry, SCAN_CHUNK_BYTES, pos);
      if (n <= 0) return undefined;
      const view = buf.subarray(0, carry + n);
      for (const m of VERSION_MARKERS) {
        const at = view.indexOf(m);
        if (at >= 0) return /^(OpenSSL [0-9][0-9a-z.]*[0-9a-z]|BoringSSL)/.exec(view.subarray(at, Math.min(view.length, at + 40)).toString("latin1"))![1];
      }
      pos += n;
      carry = Math.min(longest - 1, view.length);
      buf.copy(buf, 0, view.length - carry, view.length);
    }
  } finally {
    closeSync(fd);
  }
}

/** Whether an executable carries OpenSSL statically: traceable by its symbols, or not (no symbols), or neither. */
export function staticVerdict(path: string, size: number): StaticVerdict {
  if (size < STATIC_MIN_BYTES) return { kind: "none" };
  let functions: TlsFunction[];
  try {
    functions = tlsFunctionsIn(path);
  } catch {
    return { kind: "none" };
  }
  if (REQUIRED_FUNCTIONS.every((f) => functions.includes(f))) return { kind: "symbols", functions };
  if (size > STATIC_SCAN_MAX_BYTES) return { kind: "none" };
  const marker = versionMarkerIn(path);
  if (!marker) return { kind: "none" };
  return { kind: "no_symbols", reason: `${marker} linked statically without SSL_read/SSL_write symbols (stripped): not traceable` };
}

/** What the target finder reads of a process; injectable for tests. */
export interface TargetSource {
  /** Text of /proc/<pid>/maps, undefined when the process is gone. */
  maps(pid: number): string | undefined;
  /** The executable: its path seen from here, file key and size; undefined when gone or unreadable. */
  executable(pid: number): { path: string; key: string; size: number } | undefined;
  /** A path of the process's mount namespace as seen from here. */
  hostPath(pid: number, path: string): string;
  pids(): number[];
}

export function procTargetSource(root = "/proc"): TargetSource {
  return {
    maps(pid) {
      try {
        return readFileSync(`${root}/${pid}/maps`, "utf8");
      } catch {
        return undefined;
      }
    },
    executable(pid) {
      try {
        const path = `${root}/${pid}/exe`;
        readlinkSync(path);
        const st = statSync(path);
        return { path, key: statKey(st.dev, st.ino), size: st.size };
      } catch {
        return undefined;
      }
    },
    hostPath(pid, path) {
      return `${root}/${pid}/root${path}`;
    },
    pids() {
      try {
        return readdirSync(root).filter((n) => /^\d+$/.test(n)).map(Number);
      } catch {
        return [];
      }
    },
  };
}
