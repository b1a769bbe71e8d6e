/**
 * HTTP/2 (RFC 9113) over the bytes of one connection, one byte stream per direction, as the kernel forwards them
 * for connections it saw open with the client preface or a SETTINGS frame (or as TLS plaintext arrives).
 *
 * Each direction is a frame reader with its own HPACK decoder (RFC 7541; hpack.js's integer/string/Huffman decoder
 * and static/dynamic table, with the field loop here so that no stream object is made per connection). Header
 * blocks (HEADERS, CONTINUATION, PUSH_PROMISE) must all be decoded in order: the dynamic table depends on every
 * one. DATA and other payloads the kernel did not forward are skipped exactly (frame lengths are known); when
 * bytes of a frame header or header block are missing the direction is marked lost and decodes nothing more,
 * rather than guessing. Each stream is one exchange: the request's HEADERS (`:method`, `:path`, `:authority`,
 * `content-type`), the response's `:status`, and its end at the frame carrying END_STREAM on the response side
 * (trailers' `grpc-status` for gRPC). Bounded: header blocks up to MAX_HEADER_BLOCK_BYTES, HPACK tables up to
 * MAX_TABLE_BYTES, MAX_OPEN_STREAMS open streams per connection. Pure apart from the timestamps passed in.
 */
import hpack from "hpack.js";
import { pathOfTarget, type HttpExchange, type HttpRequestHead, type RpcInfo } from "./parser";

const PREFACE = new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
const FRAME_HEADER_BYTES = 9;
const MAX_FRAME_BYTES = 1 << 24;
/** A header block (HEADERS and its CONTINUATIONs) larger than this stops decoding of its direction. */
export const MAX_HEADER_BLOCK_BYTES = 64 * 1024;
/** The largest HPACK dynamic table accepted (a peer's SETTINGS_HEADER_TABLE_SIZE beyond it stops decoding). */
export const MAX_TABLE_BYTES = 64 * 1024;
/** The initial HPACK table size (RFC 7541 section 4.2, SETTINGS_HEADER_TABLE_SIZE default). */
const DEFAULT_TABLE_BYTES = 4096;
export const MAX_OPEN_STREAMS = 256;

const T_DATA = 0;
const T_HEADERS = 1;
const T_RST_STREAM = 3;
const T_PUSH_PROMISE = 5;
const T_CONTINUATION = 9;
const F_END_STREAM = 0x1;
const F_END_HEADERS = 0x4;
const F_PADDED = 0x8;
const F_PRIORITY = 0x20;

/** Headers kept from a block; the others only go through the HPACK table. */
const KEPT = new Set([":method", ":path", ":authority", ":scheme", ":status", "content-type", "grpc-status"]);

/** Whether the bytes a direction starts with open HTTP/2: the client preface, or a SETTINGS frame header. */
export function isH2Opening(b: Uint8Array): boolean {
  if (b.length >= 8 && b[0] === 0x50 && b[1] === 0x52 && b[2] === 0x49 && b[3] === 0x20 && b[4] === 0x2a) return true;
  if (b.length < FRAME_HEADER_BYTES) return false;
  const len = (b[0]! << 16) | (b[1]! << 8) | b[2]!;
  return b[3] === 4 && b[4] === 0 && b[5] === 0 && b[6] === 0 && b[7] === 0 && b[8] === 0 && len % 6 === 0 && len <= 96;
}

export type H2Event<T> =
  | { kind: "headers"; stream: number; headers: Map<string, string>; endStream: boolean; at: T }
  | { kind: "end"; stream: number; at: T }
  | { kind: "reset"; stream: number; at: T };

interface Frame {
  type: number;
  flags: number;
  stream: number;
  remaining: number;
  /** Payload bytes kept (header blocks and their padding/priority prefix); undefined when the payload is skipped. */
  buf: Buffer | undefined;
  filled: number;
}

/** One direction of one HTTP/2 connection: frames and the HPACK decoder of the header blocks it carries. */
export class H2Direction<T> {
  #expected: number | undefined;
  #prefaceLeft = -1;
  #header = new Uint8Array(FRAME_HEADER_BYTES);
  #headerLen = 0;
  #frame: Frame | undefined;
  /** A header block waiting for CONTINUATION frames. */
  #block: { stream: number; endStream: boolean; parts: Buffer[]; bytes: number; push: boolean } | undefined;
  readonly #table = hpack.table.create({ maxSize: MAX_TABLE_BYTES });
  #events: Array<H2Event<T>> = [];
  /** Why this direction stopped decoding (undefined while it decodes). */
  lost: string | undefined;

  /** Stream offset of the next byte expected (undefined before the first call). */
  get expectedOffset(): number | undefined {
    return this.#expected;
  }

  constructor() {
    this.#table.maxSize = DEFAULT_TABLE_BYTES;
  }

  /** Feeds one call (`offset`: stream offset of its first byte, `length` bytes moved, `captured` the first of them). */
  push(offset: number, length: number, captured: Uint8Array, at: T): Array<H2Event<T>> {
    this.#events = [];
    if (this.lost) return this.#events;
    if (this.#expected === undefined) {
      if (offset !== 0) return this.#lose("started after the connection's first bytes"), this.#events;
      this.#prefaceLeft = captured.length >= 3 && captured[0] === 0x50 && captured[1] === 0x52 && captured[2] === 0x49 ? PREFACE.length : 0;
    } else if (offset > this.#expected) {
      this.#gap(offset - this.#expected, at);
    } else if (offset < this.#expected) {
      this.#lose("bytes out of order");
    }
    this.#expected = offset + length;
    let i = 0;
    while (i < captured.length && !this.lost) i = this.#step(captured, i, at);
    if (length > captured.length && !this.lost) this.#gap(length - captured.length, at);
    return this.#events;
  }

  #lose(why: string): void {
    if (this.lost) return;
    this.lost = why;
    this.#frame = undefined;
    this.#block = undefined;
  }

  /** `n` bytes were not forwarded: only a skipped payload can absorb them. */
  #gap(n: number, at: T): void {
    if (this.lost) return;
    const f = this.#frame;
    if (f && !f.buf && f.remaining >= n) {
      f.remaining -= n;
      if (f.remaining === 0) this.#frameDone(f, at);
      return;
    }
    this.#lose(f && f.buf ? "a header block was not forwarded whole" : "bytes between frames were not forwarded");
  }

  #step(b: Uint8Array, i: number, at: T): number {
    if (this.#prefaceLeft > 0) {
      const take = Math.min(this.#prefaceLeft, b.length - i);
      for (let k = 0; k < take; k++) {
        if (b[i + k] !== PREFACE[PREFACE.length - this.#prefaceLeft + k]) {
          this.#lose("not an HTTP/2 client preface");
          return b.length;
        }
      }
      this.#prefaceLeft -= take;
      return i + take;
    }
    const f = this.#frame;
    if (!f) {
      /* Byte by byte: 9 bytes, cheaper than a subarray view. */
      const take = Math.min(FRAME_HEADER_BYTES - this.#headerLen, b.length - i);
      const h = this.#header;
      for (let k = 0; k < take; k++) h[this.#headerLen + k] = b[i + k]!;
      this.#headerLen += take;
      if (this.#headerLen === FRAME_HEADER_BYTES) this.#startFrame(at);
      return i + take;
    }
    const take = Math.min(f.remaining, b.length - i);
    if (f.buf) {
      const buf = f.buf;
      let at2 = f.filled;
      for (let k = 0; k < take; k++) buf[at2++] = b[i + k]!;
      f.filled = at2;
    }
    f.remaining -= take;
    if (f.remaining === 0) this.#frameDone(f, at);
    return i + take;
  }

  #startFrame(at: T): void {
    const h = this.#header;
    this.#headerLen = 0;
    const length = (h[0]! << 16) | (h[1]! << 8) | h[2]!;
    const type = h[3]!;
    const flags = h[4]!;
    const stream = ((h[5]! & 0x7f) << 24) | (h[6]! << 16) | (h[7]! << 8) | h[8]!;
    if (length >= MAX_FRAME_BYTES) return this.#lose("frame length out of range");
    if (this.#block && type !== T_CONTINUATION) return this.#lose("a header block was interrupted");
    const keep = type === T_HEADERS || type === T_CONTINUATION || type === T_PUSH_PROMISE;
    if (keep && (this.#block?.bytes ?? 0) + length > MAX_HEADER_BLOCK_BYTES) return this.#lose("header block over the bound");
    const f: Frame = { type, flags, stream, remaining: length, buf: keep ? Buffer.allocUnsafe(length) : undefined, filled: 0 };
    this.#frame = f;
    if (length === 0) this.#frameDone(f, at);
  }

  #frameDone(f: Frame, at: T): void {
    this.#frame = undefined;
    switch (f.type) {
      case T_DATA:
        if (f.flags & F_END_STREAM) this.#events.push({ kind: "end", stream: f.stream, at });
        return;
      case T_RST_STREAM:
        this.#events.push({ kind: "reset", stream: f.stream, at });
        return;
      case T_HEADERS:
      case T_PUSH_PROMISE: {
        let payload: Buffer = f.buf!;
        let from = 0;
        let to = payload.length;
        if (f.flags & F_PADDED) {
          to -= payload[0] ?? 0;
          from = 1;
        }
        if (f.type === T_HEADERS && f.flags & F_PRIORITY) from += 5;
        if (f.type === T_PUSH_PROMISE) from += 4;
        if (from > to) return this.#lose("padding longer than the frame");
        payload = payload.subarray(from, to);
        this.#block = { stream: f.stream, endStream: f.type === T_HEADERS && (f.flags & F_END_STREAM) !== 0, parts: [payload], bytes: payload.length, push: f.type === T_PUSH_PROMISE };
        break;
      }
      case T_CONTINUATION: {
        if (!this.#block || this.#block.stream !== f.stream) return this.#lose("CONTINUATION without a header block");
        const payload = f.buf!;
        this.#block.parts.push(payload);
        this.#block.bytes += payload.length;
        break;
      }
      default:
        return;
    }
    if (!(f.flags & F_END_HEADERS)) return;
    const block = this.#block!;
    this.#block = undefined;
    const headers = this.#decode(concat(block.parts));
    if (!headers || block.push) return;
    this.#events.push({ kind: "headers", stream: block.stream, headers, endStream: block.endStream, at });
  }

  /** Decodes one whole header block through the HPACK table; undefined (direction lost) when it does not decode. */
  #decode(block: Buffer): Map<string, string> | undefined {
    const out = new Map<string, string>();
    const table = this.#table;
    try {
      const d = hpack.decoder.create();
      if (block.length > 0) d.push(block);
      while (!d.isEmpty()) {
        if (d.decodeBit()) {
          const e = table.lookup(d.decodeInt());
          if (KEPT.has(e.name)) out.set(e.name, e.value);
          continue;
        }
        const incremental = d.decodeBit() === 1;
        if (!incremental) {
          if (d.decodeBit()) {
            const size = d.decodeInt();
            if (size > MAX_TABLE_BYTES) throw new Error("HPACK table size over the bound");
            table.updateSize(size);
            continue;
          }
          d.decodeBit(); /* never indexed */
        }
        const index = d.decodeInt();
        let name: string;
        let nameSize: number;
        if (index === 0) {
          const raw = d.decodeStr();
          nameSize = raw.length;
          name = hpack.utils.stringify(raw);
        } else {
          const e = table.lookup(index);
          name = e.name;
          nameSize = e.nameSize;
        }
        const raw = d.decodeStr();
        const value = hpack.utils.stringify(raw);
        if (incremental) table.add(name, value, nameSize, raw.length);
        if (KEPT.has(name)) out.set(name, value);
      }
    } catch (e) {
      this.#lose(`HPACK: ${(e as Error).message}`);
      return undefined;
    }
    return out;
  }
}

function concat(parts: Buffer[]): Buffer {
  return parts.length === 1 ? parts[0]! : Buffer.concat(parts);
}

/** An HTTP/2 stream that completed: request and response heads as for HTTP/1 (version "2"), `scheme`, gRPC details. */
export type H2Exchange<M> = HttpExchange<M>;

interface StreamState<M> {
  /** The direction (Io) the request travelled. */
  requestIo: 0 | 1;
  request: HttpRequestHead;
  scheme: string | undefined;
  grpc: boolean;
  startNs: bigint;
  meta: M;
  status: number | undefined;
  grpcStatus: number | undefined;
}

export interface H2Counters {
  /** Directions whose HPACK state was lost (bytes missing or undecodable): their streams give nothing more. */
  lostDirections: number;
  /** Streams forgotten unanswered: reset before a response, over MAX_OPEN_STREAMS, or open at close. */
  unanswered: number;
}

/** `/pkg.Service/Method` -> service and method (undefined when the path has another shape). */
export function grpcNames(path: string): { service: string; method: string } | undefined {
  const m = /^\/([^/]+)\/([^/]+)$/.exec(path);
  return m ? { service: m[1]!, method: m[2]! } : undefined;
}

/** Both directions of one HTTP/2 connection and its open streams. */
export class H2Connection<M> {
  readonly directions: [H2Direction<bigint>, H2Direction<bigint>] = [new H2Direction(), new H2Direction()];
  readonly #streams = new Map<number, StreamState<M>>();

  constructor(private readonly counters: H2Counters) {}

  /** Feeds one call of direction `io`; returns the exchanges it completed. */
  push(io: 0 | 1, offset: number, length: number, data: Uint8Array, atNs: bigint, meta: M): Array<H2Exchange<M>> {
    const dir = this.directions[io];
    const wasLost = dir.lost !== undefined;
    const events = dir.push(offset, length, data, atNs);
    if (!wasLost && dir.lost !== undefined) this.counters.lostDirections++;
    const done: Array<H2Exchange<M>> = [];
    for (const e of events) {
      const s = this.#streams.get(e.stream);
      if (e.kind === "headers") {
        if (!s) {
          const method = e.headers.get(":method");
          if (method === undefined) continue;
          const target = e.headers.get(":path") ?? "";
          if (this.#streams.size >= MAX_OPEN_STREAMS) {
            const oldest = this.#streams.keys().next().value as number;
            this.#streams.delete(oldest);
            this.counters.unanswered++;
          }
          const request: HttpRequestHead = { kind: "request", method, target, path: method === "CONNECT" ? undefined : pathOfTarget(target), version: "2", host: e.headers.get(":authority"), complete: true };
          const grpc = (e.headers.get("content-type") ?? "").startsWith("application/grpc");
          this.#streams.set(e.stream, { requestIo: io, request, scheme: e.headers.get(":scheme"), grpc, startNs: e.at, meta, status: undefined, grpcStatus: undefined });
          continue;
        }
        if (s.requestIo === io) continue; /* request trailers */
        const status = e.headers.get(":status");
        if (status !== undefined && s.status === undefined) {
          const n = Number(status);
          if (n >= 100 && n < 200) continue; /* interim responses */
          s.status = n;
        }
        const gs = e.headers.get("grpc-status");
        if (gs !== undefined && /^\d+$/.test(gs)) s.grpcStatus = Number(gs);
        if (e.endStream) done.push(this.#finish(e.stream, s, e.at, meta));
      } else if (s && e.kind === "end" && s.requestIo !== io) {
        done.push(this.#finish(e.stream, s, e.at, meta));
      } else if (s && e.kind === "reset") {
        if (s.status !== undefined) done.push(this.#finish(e.stream, s, e.at, meta));
        else {
          this.#streams.delete(e.stream);
          this.counters.unanswered++;
        }
      }
    }
    return done.filter((x) => x !== undefined);
  }

  #finish(id: number, s: StreamState<M>, endNs: bigint, responseMeta: M): H2Exchange<M> {
    this.#streams.delete(id);
    const role = s.requestIo === 0 ? "server" : "client";
    const x: H2Exchange<M> = {
      role,
      request: s.request,
      response: { kind: "response", status: s.status ?? 0, version: "2", complete: s.status !== undefined },
      startNs: s.startNs,
      endNs,
      meta: role === "server" ? responseMeta : s.meta,
      scheme: s.scheme,
    };
    const names = s.grpc ? grpcNames(s.request.path ?? "") : undefined;
    if (names) x.rpc = { system: "grpc", service: names.service, method: names.method, statusCode: s.grpcStatus };
    return x;
  }

  /** Whether both directions stopped decoding (nothing more can come of the connection). */
  get dead(): boolean {
    return this.directions[0].lost !== undefined && this.directions[1].lost !== undefined;
  }

  /** The connection closed: streams still open are counted as unanswered. */
  close(): void {
    this.counters.unanswered += this.#streams.size;
    this.#streams.clear();
  }
}
