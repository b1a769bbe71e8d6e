/**
 * The OpenTelemetry settings a process declares in its own environment: `OTEL_SERVICE_NAME` and
 * `OTEL_RESOURCE_ATTRIBUTES` (W3C Baggage-like `key=value,key2=value2`, values percent-decoded), read from
 * /proc/<pid>/environ. The read is bounded (ENVIRON_READ_BYTES; variables beyond it are not seen), goes into
 * one reused buffer that is zeroed after each read, and only those two variables are ever decoded: no other
 * value of a process's environment is kept, logged or exported.
 */
import { closeSync, openSync, readSync } from "node:fs";
import type { Attributes } from "../export/types";

/** The first bytes of /proc/<pid>/environ looked at (Linux keeps the initial environment there). */
export const ENVIRON_READ_BYTES = 64 * 1024;
/** Pairs of OTEL_RESOURCE_ATTRIBUTES kept at most. */
export const MAX_RESOURCE_PAIRS = 64;
/** Longest key or value kept from OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME (longer ones are dropped). */
export const MAX_VALUE_CHARS = 255;

/** What a process declares about itself. */
export interface OtelEnvironment {
  /** OTEL_SERVICE_NAME, when set and not empty. */
  serviceName?: string;
  /** The pairs of OTEL_RESOURCE_ATTRIBUTES (service.name among them when given there). */
  resourceAttributes?: Attributes;
}

const SERVICE_NAME_VAR = "OTEL_SERVICE_NAME=";
const RESOURCE_ATTRIBUTES_VAR = "OTEL_RESOURCE_ATTRIBUTES=";
const KEY_RE = /^[A-Za-z0-9_.\-/]+$/;

function decode(text: string): string | undefined {
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}

/** Parses OTEL_RESOURCE_ATTRIBUTES text; malformed pairs are skipped (as the SDKs do). */
export function parseResourceAttributes(text: string): Attributes {
  const out: Attributes = {};
  let n = 0;
  for (const pair of text.split(",")) {
    const eq = pair.indexOf("=");
    if (eq <= 0) continue;
    const key = pair.slice(0, eq).trim();
    const value = decode(pair.slice(eq + 1).trim());
    if (!KEY_RE.test(key) || key.length > MAX_VALUE_CHARS || value === undefined || value.length > MAX_VALUE_CHARS) continue;
    out[key] = value;
    if (++n >= MAX_RESOURCE_PAIRS) break;
  }
  return out;
}

/** The OTEL_* variables in the bytes of an environ file (NUL-separated `NAME=value` entries). */
export function otelEnvironmentOf(bytes: Uint8Array): OtelEnvironment {
  const out: OtelEnvironment = {};
  const td = new TextDecoder();
  let start = 0;
  while (start < bytes.length) {
    let end = bytes.indexOf(0, start);
    if (end < 0) end = bytes.length;
    // Only entries starting with "OTEL_" are decoded at all.
    if (end - start > 5 && bytes[start] === 0x4f && bytes[start + 1] === 0x54 && bytes[start + 2] === 0x45 && bytes[start + 3] === 0x4c && bytes[start + 4] === 0x5f) {
      const entry = td.decode(bytes.subarray(start, end));
      if (entry.startsWith(SERVICE_NAME_VAR)) {
        const v = entry.slice(SERVICE_NAME_VAR.length).trim();
        if (v && v.length <= MAX_VALUE_CHARS) out.serviceName = v;
      } else if (entry.startsWith(RESOURCE_ATTRIBUTES_VAR)) {
        const attrs = parseResourceAttributes(entry.slice(RESOURCE_ATTRIBUTES_VAR.length));
        if (Object.keys(attrs).length > 0) out.resourceAttributes = attrs;
      }
    }
    start = end + 1;
  }
  return out;
}

/** Reads the OTEL_* settings of a process (bounded, one reused buffer); undefined when the file cannot be read (process gone, no permission). */
export class EnvironReader {
  readonly #buffer: Uint8Array;

  constructor(
    readonly procRoot = "/proc",
    readBytes = ENVIRON_READ_BYTES,
  ) {
    this.#buffer = new Uint8Array(readBytes);
  }

  /** Not reentrant (one buffer); synchronous. */
  read(pid: number): OtelEnvironment | undefined {
    let fd: number;
    try {
      fd = openSync(`${this.procRoot}/${pid}/environ`, "r");
    } catch {
      return undefined;
    }
    let n = 0;
    try {
      while (n < this.#buffer.length) {
        const got = readSync(fd, this.#buffer, n, this.#buffer.length - n, null);
        if (got <= 0) break;
        n += got;
      }
      return otelEnvironmentOf(this.#buffer.subarray(0, n));
    } catch {
      return undefined;
    } finally {
      closeSync(fd);
      this.#buffer.fill(0, 0, n);
    }
  }
}
