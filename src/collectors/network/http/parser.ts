/**
 * HTTP/1.x framing over the bytes the kernel captured of one direction of one TCP connection.
 *
 * The kernel sends, per read or write, the stream offset of its bytes, how many bytes moved and the first
 * bytes of them (often fewer). The parser follows message framing (start line, headers, Content-Length or
 * chunked bodies) across calls, so keep-alive connections, pipelined messages and heads split across reads
 * do not mix. Bytes it never saw are a gap: inside a body of known length they are skipped exactly;
 * anywhere else the parser loses sync and waits for a call whose bytes begin a new message.
 * It also finds where each message ends: the call that carried its last byte (end of the head for bodyless
 * messages, Content-Length, the chunked terminator); a message whose framing was lost, or that runs until the
 * connection closes, ends at the last call before the next message starts (or `finish` at close).
 * A request line longer than the captured bytes still gives a request (method and the target's captured prefix,
 * `truncated: "url"`); a head cut after its start line gives one with `truncated: "headers"`.
 * Pure: no I/O, no clocks.
 */

const MAX_HEAD_BYTES = 8192;
const MAX_METHOD_CHARS = 16;
const MAX_CHUNK_LINE_BYTES = 64;
const CR = 13;
const LF = 10;
const SP = 32;

/** Methods recognised at the start of a request (RFC 9110 and the WebDAV/PATCH extensions seen in practice). */
export const HTTP_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK"] as const;
const METHOD_SET = new Set<string>(HTTP_METHODS);
const STATUS_PREFIX = "HTTP/1.";

export interface HttpRequestHead {
  kind: "request";
  method: string;
  /** The request target as sent (may carry a query). */
  target: string;
  /** The path of the target, query and fragment stripped; undefined for authority-form (CONNECT) targets. */
  path: string | undefined;
  /** "1.0" or "1.1"; undefined when the start line was cut before it. */
  version: string | undefined;
  /** The Host header, when it was within the captured bytes. */
  host: string | undefined;
  /** The User-Agent header, when it was within the captured bytes. */
  userAgent?: string;
  /** The Upgrade header (protocols the client asks to switch to, e.g. "h2c"), when it was within the captured bytes. */
  upgrade?: string;
  /** The W3C Trace Context `traceparent` header as sent (not validated: trace-context.ts), when captured; "" when sent twice. */
  traceparent?: string;
  /** False when the head was cut by bytes the kernel did not capture (headers may be missing). */
  complete: boolean;
  /** What the cut took: "url" (the request line was cut inside the target: target/path are its captured prefix), "headers" (some header lines). */
  truncated?: "url" | "headers";
}

/**
 * HttpResponseHead.status of a response that was seen but whose status is not known: an HTTP/2 stream of a
 * connection decoded from its middle whose `:status` is named by an HPACK entry from before (./h2). Neither a status
 * nor an error: spans and RED series have no http.response.status_code, and no error.type, for it.
 */
export const STATUS_UNKNOWN = -1;

/**
 * HttpResponseHead.status of an HTTP/2 request whose stream was reset (RST_STREAM) before any response: no status;
 * its RED series say error.type `stream_reset`; it is no span (counted as an `http_unanswered` drop, like an HTTP/1.x
 * request whose connection closed first).
 */
export const STATUS_RESET = -2;

export interface HttpResponseHead {
  kind: "response";
  /** The status code; 0: no response (the connection closed first); STATUS_UNKNOWN. */
  status: number;
  version: string;
  complete: boolean;
  /** "headers" when some header lines were not captured. */
  truncated?: "headers";
}

export type HttpHead = HttpRequestHead | HttpResponseHead;

/** A request and its response, ready to become a span. */
export interface HttpExchange<M = unknown> {
  role: "server" | "client";
  request: HttpRequestHead;
  response: HttpResponseHead;
  /** Server: when the request arrived; client: when the request was written. Kernel monotonic ns. */
  startNs: bigint;
  /** Server: when the response's last byte was written; client: when it arrived. */
  endNs: bigint;
  meta: M;
  /** HTTP/2: the request's `:scheme`. */
  scheme?: string;
  /** A gRPC call (HTTP/2 with content-type application/grpc). */
  rpc?: RpcInfo;
  /** HTTP/2: the stream's id. */
  id?: number;
}

/**
 * An exchange's duration in ns (0 when its clocks run backwards): each clock as a number, not their BigInt difference
 * (an allocation per exchange, on the path that counts every HTTP/2 and gRPC exchange); exact to the nanosecond for
 * 104 days of uptime, and within a few nanoseconds for years.
 */
export function exchangeDurationNs(x: HttpExchange<unknown>): number {
  return Math.max(0, Number(x.endNs) - Number(x.startNs));
}

/** What a gRPC call adds to an exchange (RPC semantic conventions). */
export interface RpcInfo {
  system: "grpc";
  service: string;
  method: string;
  /**
   * grpc-status of the trailers (or of a trailers-only response); undefined when none arrived; STATUS_UNKNOWN when
   * the response named fields by HPACK entries from before decoding began (a connection decoded from its middle).
   */
  statusCode: number | undefined;
}

/** A message start found in a chunk, with the timestamp of the call whose bytes carried its first byte. */
export interface ParsedMessage<T> {
  head: HttpHead;
  /** Opaque value of the chunk the message started in (e.g. the kernel timestamp). */
  at: T;
  /** Stream offset of the byte after the head's empty line, for a head read whole (else undefined). */
  headEnd: number | undefined;
}

type State =
  | { s: "idle" }
  | { s: "lost" }
  | { s: "head" }
  | { s: "body"; remaining: number }
  | { s: "chunk-size" }
  | { s: "chunk-data"; remaining: number }
  | { s: "chunk-crlf"; remaining: number }
  | { s: "trailers" }
  | { s: "until-close" };

/** The states without data, shared (never modified; those with `remaining` are made per use). */
const IDLE: State = Object.freeze({ s: "idle" });
const LOST: State = Object.freeze({ s: "lost" });
const HEAD: State = Object.freeze({ s: "head" });
const CHUNK_SIZE: State = Object.freeze({ s: "chunk-size" });
const TRAILERS: State = Object.freeze({ s: "trailers" });
const UNTIL_CLOSE: State = Object.freeze({ s: "until-close" });

/** Tells the response side that the next response answers a HEAD request (so it has no body). */
export type BodylessHint = () => boolean;

const METHOD_BYTES: readonly Uint8Array[] = HTTP_METHODS.map((m) => new TextEncoder().encode(m + " "));
const STATUS_BYTES = new TextEncoder().encode(STATUS_PREFIX);

function prefixMatches(bytes: Uint8Array, from: number, n: number, pattern: Uint8Array): boolean {
  const len = Math.min(n, pattern.length);
  for (let i = 0; i < len; i++) if (bytes[from + i] !== pattern[i]) return false;
  return true;
}

/** Whether `bytes[from..]` could be the start of an HTTP/1.x message (a prefix of one counts). */
export function looksLikeMessageStart(bytes: Uint8Array, from = 0): boolean {
  const n = bytes.length - from;
  if (n <= 0) return false;
  const c = bytes[from]!;
  if (c < 65 || c > 90) return false;
  if (c === 72 && prefixMatches(bytes, from, n, STATUS_BYTES)) return true;
  for (const m of METHOD_BYTES) if (m[0] === c && prefixMatches(bytes, from, n, m)) return true;
  return false;
}

/** Path of a request target: origin-form `/p?q`, absolute-form `http://h/p?q`, `*`; undefined for authority-form. */
export function pathOfTarget(target: string): string | undefined {
  let t = target;
  if (!t.startsWith("/") && t !== "*") {
    const scheme = t.indexOf("://");
    if (scheme < 0) return undefined;
    const slash = t.indexOf("/", scheme + 3);
    t = slash < 0 ? "/" : t.slice(slash);
  }
  for (let i = 0; i < t.length; i++) {
    const c = t.charCodeAt(i);
    if (c === 63 || c === 35) return t.slice(0, i); // '?' or '#'
  }
  return t;
}

/** Latin-1 text (every byte one char; WHATWG "latin1" is windows-1252, equal on the ASCII that matters here). */
const LATIN1 = new TextDecoder("latin1" as "utf-8");

/** `text.replace(/\r?\n\r?\n$/, "")` without a regular expression. */
function withoutFinalEmptyLine(text: string): string {
  let end = text.length;
  if (text.charCodeAt(end - 1) !== LF) return text;
  end--;
  if (text.charCodeAt(end - 1) === CR) end--;
  if (text.charCodeAt(end - 1) !== LF) return text;
  end--;
  if (text.charCodeAt(end - 1) === CR) end--;
  return text.slice(0, end);
}

interface HeadFields {
  head: HttpHead;
  contentLength: number | undefined;
  chunked: boolean;
  close: boolean;
}

const isDigit = (c: number) => c >= 48 && c <= 57;

/** A request line cut inside its target ("GET /very/long?q=..." with no version yet); undefined otherwise. */
function parseCutRequestLine(line: string): HttpRequestHead | undefined {
  const sp1 = line.indexOf(" ");
  if (sp1 <= 0 || sp1 > MAX_METHOD_CHARS || sp1 === line.length - 1) return undefined;
  const method = line.slice(0, sp1);
  const target = line.slice(sp1 + 1);
  if (!METHOD_SET.has(method) || target.includes(" ") || /[\x00-\x1f\x7f]/.test(target)) return undefined;
  return { kind: "request", method, target, path: pathOfTarget(target), version: undefined, host: undefined, complete: false, truncated: "url" };
}

/** Parses a start line; undefined when it is not HTTP/1.x. */
function parseStartLine(line: string, complete: boolean): HttpHead | undefined {
  if (line.startsWith(STATUS_PREFIX)) {
    /* HTTP/1.x SP 3DIGIT [SP reason] */
    const v = line.charCodeAt(7);
    if ((v !== 48 && v !== 49) || line.charCodeAt(8) !== SP) return undefined;
    if (!isDigit(line.charCodeAt(9)) || !isDigit(line.charCodeAt(10)) || !isDigit(line.charCodeAt(11))) return undefined;
    if (line.length > 12 && line.charCodeAt(12) !== SP) return undefined;
    return { kind: "response", version: line.slice(5, 8), status: Number(line.slice(9, 12)), complete };
  }
  const sp1 = line.indexOf(" ");
  const sp2 = line.lastIndexOf(" ");
  if (sp1 <= 0 || sp2 <= sp1 + 1 || sp1 > MAX_METHOD_CHARS) return undefined;
  const method = line.slice(0, sp1);
  const version = line.slice(sp2 + 1);
  if (!METHOD_SET.has(method) || (version !== "HTTP/1.1" && version !== "HTTP/1.0")) return undefined;
  const target = line.slice(sp1 + 1, sp2);
  if (target.includes(" ")) return undefined;
  return { kind: "request", method, target, path: pathOfTarget(target), version: version.slice(5), host: undefined, complete };
}

/** The header names parseHead reads, lower case. */
const WANTED_HEADERS = ["content-length", "transfer-encoding", "connection", "host", "user-agent", "upgrade", "traceparent"] as const;

/** Whether `c` is a character String.prototype.trim removes (those a Latin-1 or windows-1252 head can hold). */
const isTrimmed = (c: number) => c === 32 || (c >= 9 && c <= 13) || c === 0xa0 || c === 0xfeff || c === 0x2028 || c === 0x2029 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x202f || c === 0x205f || c === 0x3000;

/** Which of WANTED_HEADERS `text[from..to)` names (`slice(from, to).trim().toLowerCase()` without building it), or undefined. */
function headerName(text: string, from: number, to: number): (typeof WANTED_HEADERS)[number] | undefined {
  while (from < to && isTrimmed(text.charCodeAt(from))) from++;
  while (to > from && isTrimmed(text.charCodeAt(to - 1))) to--;
  const n = to - from;
  next: for (const name of WANTED_HEADERS) {
    if (name.length !== n) continue;
    for (let i = 0; i < n; i++) {
      let c = text.charCodeAt(from + i);
      if (c >= 65 && c <= 90) c += 32;
      if (c !== name.charCodeAt(i)) continue next;
    }
    return name;
  }
  return undefined;
}

/** Parses a head (start line and header lines, without the final empty line). Undefined when it is not HTTP/1.x. */
export function parseHead(text: string, complete: boolean): HeadFields | undefined {
  let end = text.indexOf("\n");
  if (end < 0) end = text.length;
  const head = parseStartLine(text.charCodeAt(end - 1) === CR ? text.slice(0, end - 1) : text.slice(0, end), complete);
  if (!head) return undefined;
  let contentLength: number | undefined;
  let chunked = false;
  let close = false;
  let at = end + 1;
  while (at < text.length) {
    let nl = text.indexOf("\n", at);
    if (nl < 0) nl = text.length;
    const colon = text.indexOf(":", at);
    if (colon > at && colon < nl) {
      const first = text.charCodeAt(at) | 0x20;
      /* Only the headers framing and naming need: content-length, transfer-encoding, connection, host, user-agent, upgrade, traceparent. */
      if (first === 99 || first === 116 || first === 104 || first === 117) {
        const name = headerName(text, at, colon);
        if (name !== undefined) {
          const value = text.slice(colon + 1, nl).trim();
          if (name === "content-length") {
            if (/^\d{1,15}$/.test(value)) contentLength = Number(value);
          } else if (name === "transfer-encoding") chunked = value.toLowerCase().split(",").some((v) => v.trim() === "chunked");
          else if (name === "connection") close = value.toLowerCase().includes("close");
          else if (name === "host" && head.kind === "request") head.host = value;
          else if (name === "user-agent" && head.kind === "request") head.userAgent = value;
          else if (name === "upgrade" && head.kind === "request") head.upgrade = value;
          else if (name === "traceparent" && head.kind === "request") head.traceparent = head.traceparent === undefined ? value : "";
        }
      }
    }
    at = nl + 1;
  }
  return { head, contentLength, chunked, close };
}

/** Bytes String.prototype.trim removes from a Latin-1/windows-1252 head: the ones decoding to whitespace (isTrimmed). */
const isTrimmedByte = (c: number) => c === 32 || (c >= 9 && c <= 13) || c === 0xa0;

/** Whether b[from..to) is `lower` (lower-case ASCII) in any ASCII case. */
function bytesEqualFolded(b: Uint8Array, from: number, to: number, lower: string): boolean {
  if (to - from !== lower.length) return false;
  for (let i = 0; i < lower.length; i++) {
    let c = b[from + i]!;
    if (c >= 65 && c <= 90) c += 32;
    if (c !== lower.charCodeAt(i)) return false;
  }
  return true;
}

/** Which of WANTED_HEADERS b[from..to) names, trimmed and in any case (headerName over bytes), or undefined. */
function headerNameBytes(b: Uint8Array, from: number, to: number): (typeof WANTED_HEADERS)[number] | undefined {
  while (from < to && isTrimmedByte(b[from]!)) from++;
  while (to > from && isTrimmedByte(b[to - 1]!)) to--;
  /* By length first: at most two names to compare. */
  switch (to - from) {
    case 4:
      return bytesEqualFolded(b, from, to, "host") ? "host" : undefined;
    case 7:
      return bytesEqualFolded(b, from, to, "upgrade") ? "upgrade" : undefined;
    case 10:
      return bytesEqualFolded(b, from, to, "connection") ? "connection" : bytesEqualFolded(b, from, to, "user-agent") ? "user-agent" : undefined;
    case 11:
      return bytesEqualFolded(b, from, to, "traceparent") ? "traceparent" : undefined;
    case 14:
      return bytesEqualFolded(b, from, to, "content-length") ? "content-length" : undefined;
    case 17:
      return bytesEqualFolded(b, from, to, "transfer-encoding") ? "transfer-encoding" : undefined;
    default:
      return undefined;
  }
}

/** `value.toLowerCase().split(",").some((v) => v.trim() === "chunked")` over b[from..to). */
function listHasChunked(b: Uint8Array, from: number, to: number): boolean {
  let s = from;
  for (let i = from; i <= to; i++) {
    if (i < to && b[i] !== 44) continue;
    let a = s;
    let e = i;
    while (a < e && isTrimmedByte(b[a]!)) a++;
    while (e > a && isTrimmedByte(b[e - 1]!)) e--;
    if (bytesEqualFolded(b, a, e, "chunked")) return true;
    s = i + 1;
  }
  return false;
}

/** `value.toLowerCase().includes("close")` over b[from..to). */
function includesClose(b: Uint8Array, from: number, to: number): boolean {
  for (let i = from; i + 5 <= to; i++) if (bytesEqualFolded(b, i, i + 5, "close")) return true;
  return false;
}

/**
 * The end of the head that starts at `from`: just past its empty line (the first line feed followed by carriage
 * returns only and a line feed), or -1 when `b` does not hold it. `lineFeeds`, when given, is emptied and then
 * holds the offsets of the line feeds of the head it found (every one in b[from..end)), for parseHeadBytes.
 */
export function headEnd(b: Uint8Array, from: number, lineFeeds?: number[]): number {
  const n = b.length;
  if (lineFeeds) lineFeeds.length = 0;
  /* indexOf: a native search costs less than a loop over the bytes here. */
  let p = b.indexOf(LF, from);
  while (p >= 0) {
    lineFeeds?.push(p);
    let q = p + 1;
    while (q < n && b[q] === CR) q++;
    if (q < n && b[q] === LF) {
      lineFeeds?.push(q);
      return q + 1;
    }
    p = b.indexOf(LF, q);
  }
  return -1;
}

/** The first `c` in b[from..to), or `to`. */
function find(b: Uint8Array, c: number, from: number, to: number): number {
  const i = b.indexOf(c, from);
  return i < 0 || i > to ? to : i;
}

/** The first `c` in b[from..to), or `to`, for a short search (a loop: a native indexOf call costs more than a few bytes). */
function findNear(b: Uint8Array, c: number, from: number, to: number): number {
  let i = from;
  while (i < to && b[i] !== c) i++;
  return i < to ? i : to;
}

/**
 * pathOfTarget of an origin-form target ("/p?q") at b[from..to), `text` being b decoded, found on the bytes; undefined
 * for the other forms.
 */
function originPath(b: Uint8Array, text: string, from: number, to: number): string | undefined {
  if (b[from] !== 47) return undefined; // '/'
  let i = from + 1;
  while (i < to && b[i] !== 63 && b[i] !== 35) i++; // '?' or '#'
  return text.slice(from, i);
}

/**
 * Host and User-Agent values seen, direct-mapped by a hash of their bytes: the last value in each slot. A service sees
 * few of them, and a kept string is read (Map keys, encoding) without resolving a new substring.
 */
const HEADER_VALUE_SLOTS = 256;
const headerValues: Array<string | undefined> = new Array<string | undefined>(HEADER_VALUE_SLOTS).fill(undefined);

/** A hash of b[from..to). */
function hashBytes(b: Uint8Array, from: number, to: number): number {
  let h = to - from;
  for (let i = from; i < to; i++) h = (Math.imul(h, 31) + b[i]!) | 0;
  return h;
}

/**
 * Whether `kept` is b[from..to) decoded. Bytes 0x80-0x9f decode to other characters: never equal here (the bytes are
 * then decoded again, still right).
 */
function keptIs(kept: string, b: Uint8Array, from: number, to: number): boolean {
  const n = to - from;
  if (kept.length !== n) return false;
  for (let i = 0; i < n; i++) if (kept.charCodeAt(i) !== b[from + i]) return false;
  return true;
}

/**
 * Request targets seen and their paths, direct-mapped by a hash of the target's bytes: the last in each slot. A
 * target found here is not decoded again (most requests of a service repeat a target: health checks, list calls).
 * Targets longer than TARGET_KEPT_CHARS are not kept.
 */
const TARGET_SLOTS = 256;
const TARGET_KEPT_CHARS = 256;
const keptTargets: Array<string | undefined> = new Array<string | undefined>(TARGET_SLOTS).fill(undefined);
const keptPaths: Array<string | undefined> = new Array<string | undefined>(TARGET_SLOTS).fill(undefined);
/** The whole hash of each kept target (a different target in the slot is told apart without reading its string). */
const keptTargetHashes = new Int32Array(TARGET_SLOTS);

/** lineFeeds[k] when it is before `end`, else `end`. */
function nextLineFeed(lineFeeds: readonly number[], k: number, end: number): number {
  const p = k < lineFeeds.length ? lineFeeds[k]! : end;
  return p < end ? p : end;
}

const VERSION_1_0 = "1.0";
const VERSION_1_1 = "1.1";

/**
 * parseHead(withoutFinalEmptyLine(latin1(b[from..to))), true) without decoding what is not kept: `to` is the end
 * of the head (headEnd). Responses are read from the bytes alone; a request decodes `b` (once at most) only for a
 * target, Host or User-Agent value not kept from an earlier head, or an Upgrade value. Undefined when it is not HTTP/1.x.
 * `lineFeeds`: the line feeds headEnd found (not searched again). `into`: an object to fill and return instead of a
 * new one (the stream parser's own, read before its next head).
 */
export function parseHeadBytes(b: Uint8Array, from: number, to: number, lineFeeds?: readonly number[], into?: HeadFields): HeadFields | undefined {
  /* withoutFinalEmptyLine, on the bytes. */
  let end = to;
  if (end > from && b[end - 1] === LF) {
    let e = end - 1;
    if (e > from && b[e - 1] === CR) e--;
    if (e > from && b[e - 1] === LF) {
      e--;
      if (e > from && b[e - 1] === CR) e--;
      end = e;
    }
  }
  /* The line feed ending each line: the next of lineFeeds, or searched for; `end` when the line runs to the end. */
  let lf = 0;
  let nl = lineFeeds ? nextLineFeed(lineFeeds, lf++, end) : find(b, LF, from, end);
  const lineEnd = nl > from && b[nl - 1] === CR ? nl - 1 : nl;
  let head: HttpHead | undefined;
  let text: string | undefined;
  const n = lineEnd - from;
  if (n >= 7 && prefixMatches(b, from, 7, STATUS_BYTES)) {
    /* HTTP/1.x SP 3DIGIT [SP reason] */
    const v = n > 7 ? b[from + 7]! : -1;
    if ((v !== 48 && v !== 49) || n < 12 || b[from + 8] !== SP) return undefined;
    const d0 = b[from + 9]!;
    const d1 = b[from + 10]!;
    const d2 = b[from + 11]!;
    if (!isDigit(d0) || !isDigit(d1) || !isDigit(d2)) return undefined;
    if (n > 12 && b[from + 12] !== SP) return undefined;
    head = { kind: "response", version: v === 49 ? VERSION_1_1 : VERSION_1_0, status: (d0 - 48) * 100 + (d1 - 48) * 10 + (d2 - 48), complete: true };
  } else {
    const sp1 = find(b, SP, from, lineEnd);
    const sp2 = lineEnd > from ? b.lastIndexOf(SP, lineEnd - 1) : -1;
    if (sp1 >= lineEnd || sp1 === from || sp2 <= sp1 + 1 || sp1 - from > MAX_METHOD_CHARS) return undefined;
    let method: string | undefined;
    for (let m = 0; m < HTTP_METHODS.length; m++) {
      const name = HTTP_METHODS[m]!;
      if (name.length === sp1 - from && prefixMatches(b, from, name.length, METHOD_BYTES[m]!)) {
        method = name;
        break;
      }
    }
    if (method === undefined || lineEnd - sp2 - 1 !== 8 || !prefixMatches(b, sp2 + 1, 7, STATUS_BYTES)) return undefined;
    const minor = b[sp2 + 8];
    if (minor !== 48 && minor !== 49) return undefined;
    if (find(b, SP, sp1 + 1, sp2) !== sp2) return undefined;
    let target: string;
    let path: string | undefined;
    const keep = sp2 - sp1 - 1 <= TARGET_KEPT_CHARS;
    const hash = keep ? hashBytes(b, sp1 + 1, sp2) : 0;
    const slot = keep ? hash & (TARGET_SLOTS - 1) : -1;
    const kept = slot >= 0 && keptTargetHashes[slot] === hash ? keptTargets[slot] : undefined;
    if (kept !== undefined && keptIs(kept, b, sp1 + 1, sp2)) {
      target = kept;
      path = keptPaths[slot];
    } else {
      /* The whole call decoded, not a view of it: a view of a small array costs more than the bytes after the head. */
      text = LATIN1.decode(b);
      target = text.slice(sp1 + 1, sp2);
      path = originPath(b, text, sp1 + 1, sp2) ?? pathOfTarget(target);
      if (slot >= 0) {
        keptTargets[slot] = target;
        keptPaths[slot] = path;
        keptTargetHashes[slot] = hash;
      }
    }
    head = { kind: "request", method, target, path, version: minor === 49 ? VERSION_1_1 : VERSION_1_0, host: undefined, complete: true };
  }
  let contentLength: number | undefined;
  let chunked = false;
  let close = false;
  let at = nl + 1;
  while (at < end) {
    nl = lineFeeds ? nextLineFeed(lineFeeds, lf++, end) : find(b, LF, at, end);
    const first = b[at]! | 0x20;
    /* Only the headers framing and naming need: content-length, transfer-encoding, connection, host, user-agent, upgrade, traceparent. */
    const colon = first === 99 || first === 116 || first === 104 || first === 117 ? findNear(b, 58, at, nl) : nl;
    if (colon > at && colon < nl) {
      {
        const name = headerNameBytes(b, at, colon);
        if (name !== undefined) {
          let vs = colon + 1;
          let ve = nl;
          while (vs < ve && isTrimmedByte(b[vs]!)) vs++;
          while (ve > vs && isTrimmedByte(b[ve - 1]!)) ve--;
          if (name === "content-length") {
            if (ve - vs >= 1 && ve - vs <= 15) {
              let v = 0;
              let i = vs;
              for (; i < ve && isDigit(b[i]!); i++) v = v * 10 + (b[i]! - 48);
              if (i === ve) contentLength = v;
            }
          } else if (name === "transfer-encoding") chunked = listHasChunked(b, vs, ve);
          else if (name === "connection") close = includesClose(b, vs, ve);
          else if (head.kind === "request") {
            /* The call is decoded for the first value not kept (and only then). */
            if (name === "upgrade") head.upgrade = (text ??= LATIN1.decode(b)).slice(vs, ve);
            /* Its value alone decoded (a new one each request). Sent twice: neither is the caller's (an empty value
             * parses as no trace context). */
            else if (name === "traceparent") head.traceparent = head.traceparent === undefined ? LATIN1.decode(b.subarray(vs, ve)) : "";
            else if (name === "host" || name === "user-agent") {
              const slot = hashBytes(b, vs, ve) & (HEADER_VALUE_SLOTS - 1);
              const kept = headerValues[slot];
              const value = kept !== undefined && keptIs(kept, b, vs, ve) ? kept : (headerValues[slot] = (text ??= LATIN1.decode(b)).slice(vs, ve));
              if (name === "host") head.host = value;
              else head.userAgent = value;
            }
          }
        }
      }
    }
    at = nl + 1;
  }
  if (into === undefined) return { head, contentLength, chunked, close };
  into.head = head;
  into.contentLength = contentLength;
  into.chunked = chunked;
  into.close = close;
  return into;
}

/** A parser's head fields before its first head (never read). */
const NO_HEAD: HttpHead = Object.freeze({ kind: "response", version: VERSION_1_1, status: 0, complete: false });

/** The line feeds of the head being parsed (headEnd, parseHeadBytes), one array for every parser (one thread). */
const LINE_FEEDS: number[] = [];

/**
 * One direction of one connection. `push` is called in stream order with each captured call; it returns the
 * messages that started in it. Not thread-safe (one owner).
 */
export class HttpStreamParser<T> {
  #state: State = IDLE;
  /** Stream offset of the next byte expected. */
  #expected: number | undefined;
  #headParts: Uint8Array[] = [];
  #headBytes = 0;
  /** Bytes of the current head line so far (CR not counted); 0 right after a line feed. */
  #lineLen = 0;
  #headAt: T | undefined;
  #chunkLine: number[] = [];
  /** The messages started by the current call: one array, emptied at each push and returned by it. */
  readonly #messages: Array<ParsedMessage<T>> = [];
  /** The fields of the head parsed last (parseHeadBytes fills it: read before the next head). */
  readonly #fields: HeadFields = { head: NO_HEAD, contentLength: undefined, chunked: false, close: false };
  /** The message objects of #messages, refilled at each push (the caller reads them before the next). */
  readonly #messagePool: Array<ParsedMessage<T>> = [];
  /** The body state of this direction's messages, refilled for each (only #state refers to it). */
  readonly #body: { s: "body"; remaining: number } = { s: "body", remaining: 0 };
  /** Stream offset of the call being fed, and of the byte after the head completed in it (for ParsedMessage.headEnd). */
  #callOffset = 0;
  #headEnd: number | undefined;
  /** Calls whose bytes were not HTTP or arrived while out of sync. */
  ignoredCalls = 0;
  /** Heads that started like an HTTP/1.x message but did not parse (nothing to report). */
  unparsedHeads = 0;
  /** A message started and its end was not found yet. */
  #open = false;
  /** Value of the previous call (the last one before the current). */
  #prevAt: T | undefined;
  /** The ends found in the current call (one array, emptied at each push). */
  readonly #ends: T[] = [];
  /** Times the parser lost sync (a gap or malformed framing). */
  resyncs = 0;

  constructor(private readonly bodyless: BodylessHint = () => false) {}

  /** Stream offset of the next byte expected (undefined before the first call). */
  get expectedOffset(): number | undefined {
    return this.#expected;
  }

  /** The state name (for tests and debugging). */
  get state(): State["s"] {
    return this.#state.s;
  }

  /**
   * Feeds one call: `offset` is the stream offset of its first byte, `length` how many bytes it moved, and
   * `captured` the first of them (captured.length <= length). Returns the messages that started in it: read-only,
   * an array the next push empties and refills with message objects it refills too (read them before, as `ends`);
   * the ends found while feeding it are then in `ends`.
   */
  push(offset: number, length: number, captured: Uint8Array, at: T): ReadonlyArray<ParsedMessage<T>> {
    this.#callOffset = offset;
    this.#messages.length = 0;
    this.#ends.length = 0;
    if (this.#expected !== undefined && offset !== this.#expected) {
      if (offset > this.#expected) this.#gap(offset - this.#expected, this.#prevAt as T);
      else this.#loseSync();
    }
    this.#expected = offset + length;
    const atStart = this.#state.s === "idle" || this.#state.s === "lost";
    if (atStart && !looksLikeMessageStart(captured)) {
      this.ignoredCalls++;
      this.#state = LOST;
      this.#prevAt = at;
      return this.#messages;
    }
    if (this.#state.s === "lost") this.#state = IDLE;
    let i = 0;
    while (i < captured.length) {
      i = this.#step(captured, i, at);
      if (this.state === "lost") break;
    }
    const tail = length - captured.length;
    if (tail > 0) this.#gap(tail, at);
    this.#prevAt = at;
    return this.#messages;
  }

  /**
   * The values of the calls that carried the last byte of messages ended by the latest `push`, in order: an array
   * the next push empties and refills (read it before).
   */
  get ends(): readonly T[] {
    return this.#ends;
  }

  /**
   * The connection closed (or went quiet): a message still open ends at the last call seen; returns that call's
   * value, or undefined when no message is open. Idempotent.
   */
  finish(): T | undefined {
    if (!this.#open) return undefined;
    this.#open = false;
    return this.#prevAt;
  }

  #end(at: T): void {
    if (!this.#open) return;
    this.#open = false;
    this.#ends.push(at);
  }

  /** `n` bytes of the call `at` were not seen. */
  #gap(n: number, at: T): void {
    const st = this.#state;
    if (st.s === "body" || st.s === "chunk-data") {
      if (st.remaining >= n) {
        st.remaining -= n;
        if (st.remaining === 0 && st.s === "body") {
          this.#state = IDLE;
          this.#end(at);
        }
        if (st.remaining === 0 && st.s === "chunk-data") this.#state = { s: "chunk-crlf", remaining: 2 };
        return;
      }
      if (st.s === "chunk-data" && n <= st.remaining + 2) {
        /* The rest of the chunk and (part of) its CRLF: one chunk per write, the common case. */
        const crlf = n - st.remaining;
        this.#state = crlf === 2 ? CHUNK_SIZE : { s: "chunk-crlf", remaining: 2 - crlf };
        return;
      }
    }
    if (st.s === "chunk-crlf" && n <= st.remaining) {
      st.remaining -= n;
      if (st.remaining === 0) this.#state = CHUNK_SIZE;
      return;
    }
    if (st.s === "until-close") return;
    if (st.s === "head") this.#finishHead(false, at);
    this.#loseSync();
  }

  #loseSync(): void {
    if (this.#state.s !== "lost") this.resyncs++;
    this.#state = LOST;
    this.#headParts = [];
    this.#headBytes = 0;
    this.#headAt = undefined;
    this.#chunkLine = [];
  }

  /** Consumes bytes from `i` in the current state; returns the new position. */
  #step(b: Uint8Array, i: number, at: T): number {
    const st = this.#state;
    switch (st.s) {
      case "idle":
        if (!looksLikeMessageStart(b, i)) {
          this.#loseSync();
          return b.length;
        }
        /* A message whose end was not found (framing lost, or until close) ends where this one starts: at the
         * previous call when this one starts at its first byte, else in this call. */
        if (this.#open) this.#end(i === 0 && this.#prevAt !== undefined ? this.#prevAt : at);
        /* No head parts are held outside the head state (#finishHead and #loseSync empty them). */
        this.#state = HEAD;
        this.#headBytes = 0;
        this.#lineLen = 0;
        this.#headAt = at;
        return i;
      case "head": {
        if (this.#headParts.length === 0) {
          /* A head starting in this call (at a letter: no line is open). When its empty line is in this call too
           * (the common case), it is parsed from the bytes: nothing is copied, and only what a request keeps is decoded. */
          const j = headEnd(b, i, LINE_FEEDS);
          if (j >= 0) {
            this.#headAt = undefined;
            this.#headEnd = this.#callOffset + j;
            this.#completeHead(parseHeadBytes(b, i, j, LINE_FEEDS, this.#fields), at, at);
            return j;
          }
        }
        /* Scan for the empty line that ends the head; copy the scanned bytes once. */
        let j = i;
        let done = false;
        while (j < b.length) {
          const c = b[j++]!;
          if (c === LF) {
            if (this.#lineLen === 0) {
              done = true;
              break;
            }
            this.#lineLen = 0;
          } else if (c !== CR) {
            this.#lineLen++;
          }
        }
        this.#headParts.push(b.slice(i, j));
        this.#headBytes += j - i;
        if (done) {
          this.#headEnd = this.#callOffset + j;
          this.#finishHead(true, at);
          return j;
        }
        if (this.#headBytes >= MAX_HEAD_BYTES) {
          this.#finishHead(false, at);
          this.#loseSync();
          return b.length;
        }
        return j;
      }
      case "body": {
        const take = Math.min(st.remaining, b.length - i);
        st.remaining -= take;
        if (st.remaining === 0) {
          this.#state = IDLE;
          this.#end(at);
        }
        return i + take;
      }
      case "until-close":
        return b.length;
      case "chunk-size":
      case "trailers": {
        while (i < b.length) {
          const c = b[i++]!;
          if (c !== LF) {
            if (c !== CR) this.#chunkLine.push(c);
            if (this.#chunkLine.length > MAX_CHUNK_LINE_BYTES && st.s === "chunk-size") {
              this.#loseSync();
              return b.length;
            }
            continue;
          }
          const line = String.fromCharCode(...this.#chunkLine);
          this.#chunkLine = [];
          if (st.s === "trailers") {
            if (line === "") {
              this.#state = IDLE;
              this.#end(at);
            }
            return i;
          }
          const size = parseInt(line.split(";")[0]!.trim(), 16);
          if (!Number.isFinite(size) || size < 0 || !/^[0-9a-fA-F]+/.test(line)) {
            this.#loseSync();
            return b.length;
          }
          this.#state = size === 0 ? TRAILERS : { s: "chunk-data", remaining: size };
          return i;
        }
        return i;
      }
      case "chunk-data": {
        const take = Math.min(st.remaining, b.length - i);
        st.remaining -= take;
        if (st.remaining === 0) this.#state = { s: "chunk-crlf", remaining: 2 };
        return i + take;
      }
      case "chunk-crlf": {
        while (i < b.length && st.remaining > 0) {
          const c = b[i++]!;
          if (c === LF) st.remaining = 0;
          else if (c === CR) st.remaining = 1;
          else {
            this.#loseSync();
            return b.length;
          }
        }
        if (st.remaining === 0) this.#state = CHUNK_SIZE;
        return i;
      }
      case "lost":
        return b.length;
    }
  }

  /**
   * Ends the head collected so far (`now`: the call being fed; `whole`: the head's text when it came in one call
   * and was not collected): reports the message and sets the body state.
   */
  #finishHead(complete: boolean, now: T, whole?: string): void {
    const at = this.#headAt as T;
    let text = whole ?? "";
    for (const part of this.#headParts) text += LATIN1.decode(part);
    this.#headParts = [];
    this.#headBytes = 0;
    this.#headAt = undefined;
    text = withoutFinalEmptyLine(text);
    if (!complete && !text.includes("\n")) {
      /* The start line itself was cut: report it if it still parses, or its method and the target's prefix. */
      const head = parseHead(text, false)?.head ?? parseCutRequestLine(text.replace(/\r$/, ""));
      if (head) this.#report(head, at);
      else this.unparsedHeads++;
      this.#state = LOST;
      return;
    }
    const parsed = parseHead(text, complete);
    if (parsed && !complete) {
      parsed.head.truncated = "headers";
      this.#report(parsed.head, at);
      this.#state = LOST;
      return;
    }
    this.#completeHead(parsed, at, now);
  }

  /** A whole head parsed (undefined: it did not parse), that started in the call `at`: reports it and sets the body state. */
  #completeHead(parsed: HeadFields | undefined, at: T, now: T): void {
    const headEnd = this.#headEnd;
    this.#headEnd = undefined;
    if (!parsed) {
      this.unparsedHeads++;
      this.#loseSync();
      return;
    }
    this.#report(parsed.head, at, headEnd);
    this.#state = this.#bodyState(parsed);
    if (this.#state.s === "idle") this.#end(now);
  }

  #report(head: HttpHead, at: T, headEnd?: number): void {
    const n = this.#messages.length;
    let m = this.#messagePool[n];
    if (m === undefined) this.#messagePool.push((m = { head, at, headEnd }));
    else {
      m.head = head;
      m.at = at;
      m.headEnd = headEnd;
    }
    this.#messages.push(m);
    this.#open = true;
  }

  #bodyState(p: HeadFields): State {
    const h = p.head;
    if (h.kind === "response") {
      const noBody = (h.status >= 100 && h.status < 200) || h.status === 204 || h.status === 304 || this.bodyless();
      if (noBody) return IDLE;
    }
    if (p.chunked) return CHUNK_SIZE;
    if (p.contentLength !== undefined) {
      if (p.contentLength === 0) return IDLE;
      this.#body.remaining = p.contentLength;
      return this.#body;
    }
    if (h.kind === "request") return IDLE;
    return UNTIL_CLOSE;
  }
}
