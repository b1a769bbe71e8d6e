/**
 * HTTP/2 (RFC 9113) over the bytes of one connection, one byte stream per direction, as the kernel forwards them
 * for connections it saw open with the client preface or a SETTINGS frame (or as TLS plaintext arrives).
 *
 * Each direction is a frame reader with its own HPACK decoder (./hpack: the dynamic table kept exact, strings built
 * only for the fields read here); what the frames say goes to the connection as they are read (H2Sink). Header
 * blocks (HEADERS, CONTINUATION, PUSH_PROMISE) must all be decoded in order: the dynamic table depends on every
 * one. DATA and other payloads the kernel did not forward are skipped exactly (frame lengths are known); when
 * bytes of a frame header or header block are missing the direction is marked lost and decodes nothing more,
 * rather than guessing. Each stream is one exchange: the request's HEADERS (`:method`, `:path`, `:authority`,
 * `content-type`), the response's `:status`, and its end at the frame carrying END_STREAM on the response side
 * (trailers' `grpc-status` for gRPC). Bounded: header blocks up to MAX_HEADER_BLOCK_BYTES, HPACK tables up to
 * MAX_TABLE_BYTES, MAX_OPEN_STREAMS open streams per connection. Pure apart from the timestamps passed in.
 */
import { F_AUTHORITY, F_CONTENT_TYPE, F_GRPC_STATUS, F_GRPC_TIMEOUT, F_METHOD, F_PATH, F_SCHEME, F_STATUS, F_TRACEPARENT, HpackDecoder, HpackError, KEPT_NAMES, type HeaderFields } from "./hpack-decoder";
import { STATUS_RESET, STATUS_UNKNOWN, pathOfTarget, type HttpExchange, type HttpRequestHead, type HttpResponseHead, type RpcInfo } from "./parser";

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

/** A header block buffer larger than this is let go once its block is decoded. */
const SMALL_BLOCK_BYTES = 4096;
const EMPTY = new Uint8Array(0);

/** Whether the bytes a direction starts with open HTTP/2: the client preface, or a SETTINGS frame header. */
export function isH2Opening(b: Uint8Array): boolean {
  if (b.length >= 8 && b[0] === 0x50 && b[1] === 0x52 && b[2] === 0x49 && b[3] === 0x20 && b[4] === 0x2a) return true;
  if (b.length < FRAME_HEADER_BYTES) return false;
  const len = (b[0]! << 16) | (b[1]! << 8) | b[2]!;
  return b[3] === 4 && b[4] === 0 && b[5] === 0 && b[6] === 0 && b[7] === 0 && b[8] === 0 && len % 6 === 0 && len <= 96;
}

/** The largest frame a direction decoded from its middle may start with (SETTINGS_MAX_FRAME_SIZE's initial value). */
const MIDSTREAM_MAX_FRAME_BYTES = 16384;

/**
 * Whether the 9 bytes at `b[o]` can be an HTTP/2 frame header (RFC 9113 section 6: a known type, its flags, its
 * stream (0 or not) and, where fixed, its length; the reserved bit clear; at most 16,384 bytes long): the frame's
 * whole length, header included, or 0. The kernel's h2_frame_start (ffi/bpf/common.h) asks the same.
 */
export function h2FrameAt(b: Uint8Array, o: number): number {
  if (b.length - o < FRAME_HEADER_BYTES) return 0;
  const len = (b[o]! << 16) | (b[o + 1]! << 8) | b[o + 2]!;
  const type = b[o + 3]!;
  const flags = b[o + 4]!;
  if (len > MIDSTREAM_MAX_FRAME_BYTES || b[o + 5]! & 0x80) return 0;
  const stream = b[o + 5]! | b[o + 6]! | b[o + 7]! | b[o + 8]!;
  let ok: boolean;
  switch (type) {
    case 0: ok = stream !== 0 && (flags & ~0x09) === 0; break; /* DATA: END_STREAM, PADDED */
    case 1: ok = stream !== 0 && (flags & ~0x2d) === 0; break; /* HEADERS: END_STREAM, END_HEADERS, PADDED, PRIORITY */
    case 2: ok = stream !== 0 && len === 5 && flags === 0; break; /* PRIORITY */
    case 3: ok = stream !== 0 && len === 4 && flags === 0; break; /* RST_STREAM */
    case 4: ok = stream === 0 && (flags === 0 ? len % 6 === 0 : flags === 1 && len === 0); break; /* SETTINGS (ACK) */
    case 5: ok = stream !== 0 && (flags & ~0x0c) === 0 && len >= 4; break; /* PUSH_PROMISE: END_HEADERS, PADDED */
    case 6: ok = stream === 0 && len === 8 && (flags & ~0x01) === 0; break; /* PING (ACK) */
    case 7: ok = stream === 0 && len >= 8 && flags === 0; break; /* GOAWAY */
    case 8: ok = len === 4 && flags === 0; break; /* WINDOW_UPDATE */
    case 9: ok = stream !== 0 && (flags & ~0x04) === 0; break; /* CONTINUATION: END_HEADERS */
    default: ok = false;
  }
  return ok ? FRAME_HEADER_BYTES + len : 0;
}

/**
 * Whether a call of `length` bytes (`b` the first of them) starts at a frame boundary as far as can be told: a
 * frame header at its start (not a CONTINUATION's, nor an empty HEADERS frame's), and one after each frame that
 * ends inside the bytes at hand.
 */
function startsWithFrames(b: Uint8Array, length: number): boolean {
  const first = h2FrameAt(b, 0);
  /* Not a CONTINUATION first, nor an empty HEADERS frame (as the kernel's h2_midstream_start). */
  if (first === 0 || b[3] === T_CONTINUATION || (b[3] === T_HEADERS && first === FRAME_HEADER_BYTES)) return false;
  for (let o = first; o < length && o + FRAME_HEADER_BYTES <= b.length; ) {
    const n = h2FrameAt(b, o);
    if (n === 0) return false;
    o += n;
  }
  return true;
}

/** Where a direction reports what its frames say, as it reads them. */
export interface H2Sink<T> {
  /** A header block (HEADERS and its CONTINUATIONs) decoded: `fields` indexed by F_* (valid during the call only). */
  headers(stream: number, fields: HeaderFields, endStream: boolean, at: T): void;
  /** A DATA frame with END_STREAM. */
  end(stream: number, at: T): void;
  /** An RST_STREAM frame: its error code (undefined when its payload is not the 4 bytes it must be). */
  reset(stream: number, code: number | undefined, at: T): void;
}

/** One direction of one HTTP/2 connection: frames and the HPACK decoder of the header blocks it carries. */
export class H2Direction<T> {
  #expected: number | undefined;
  /** Stream offset of the direction's first HTTP/2 byte: 0, or where an HTTP/1.1 Upgrade handed over (startAt). */
  #origin = 0;
  #prefaceLeft = -1;
  /** Decoded from the connection's middle (startMidstream): the first call that starts at a frame boundary begins it. */
  #midstream = false;
  readonly #header = new Uint8Array(FRAME_HEADER_BYTES);
  #headerLen = 0;
  /* The frame being read (#inFrame): its header fields, payload bytes left, whether its payload is kept. */
  #inFrame = false;
  #type = 0;
  #flags = 0;
  #stream = 0;
  #remaining = 0;
  #keep = false;
  /** Where the current frame's payload starts in #block. */
  #frameStart = 0;
  /** Header block bytes gathered (HEADERS/PUSH_PROMISE payload, then CONTINUATIONs), #blockLen of them. */
  #block: Uint8Array = EMPTY;
  #blockLen = 0;
  /** A header block waiting for CONTINUATION frames: its stream (0: none), END_STREAM, whether a PUSH_PROMISE. */
  #blockStream = 0;
  #blockEndStream = false;
  #blockPush = false;
  readonly #hpack = new HpackDecoder(DEFAULT_TABLE_BYTES, MAX_TABLE_BYTES);
  readonly #fields: HeaderFields = new Array(KEPT_NAMES.length);
  /** Why this direction stopped decoding (undefined while it decodes). */
  lost: string | undefined;

  constructor(private readonly sink: H2Sink<T>) {}

  /** Stream offset of the next byte expected (undefined before the first call). */
  get expectedOffset(): number | undefined {
    return this.#expected;
  }

  /** The direction speaks HTTP/2 from stream offset `offset` on (after an HTTP/1.1 Upgrade); before its first call. */
  startAt(offset: number): void {
    this.#origin = offset;
  }

  /**
   * The direction is decoded from the middle of its connection (one opened before the agent looked): calls are
   * skipped until one starts with frames (startsWithFrames), and the HPACK table starts partial. Before its first call.
   */
  startMidstream(): void {
    this.#midstream = true;
    this.#hpack.setPartial();
  }

  /** Fields of the last header block whose names the partial table did not know (HpackDecoder.unknownFields). */
  get unknownFields(): number {
    return this.#hpack.unknownFields;
  }

  /** Feeds one call (`offset`: stream offset of its first byte, `length` bytes moved, `captured` the first of them). */
  push(offset: number, length: number, captured: Uint8Array, at: T): void {
    if (this.lost) return;
    if (this.#expected === undefined) {
      if (this.#midstream) {
        if (!startsWithFrames(captured, length)) return;
        this.#origin = offset;
      }
      if (offset !== this.#origin) return this.#lose("started after the connection's first bytes");
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
  }

  /** Stops decoding (`why`); false when it had stopped already. */
  stop(why: string): boolean {
    if (this.lost) return false;
    this.#lose(why);
    return true;
  }

  #lose(why: string): void {
    if (this.lost) return;
    this.lost = why;
    this.#inFrame = false;
    this.#blockStream = 0;
    this.#block = EMPTY;
    this.#blockLen = 0;
  }

  /** `n` bytes were not forwarded: only a skipped payload can absorb them. */
  #gap(n: number, at: T): void {
    if (this.lost) return;
    if (this.#inFrame && !this.#keep && this.#remaining >= n) {
      this.#remaining -= n;
      if (this.#remaining === 0) this.#frameDone(at);
      return;
    }
    this.#lose(this.#inFrame && this.#keep ? "a header block was not forwarded whole" : "bytes between frames were not forwarded");
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
    if (!this.#inFrame) {
      if (this.#headerLen === 0 && b.length - i >= FRAME_HEADER_BYTES) {
        /* The whole frame header in this call: read in place. */
        this.#startFrame(b, i, at);
        return i + FRAME_HEADER_BYTES;
      }
      const take = Math.min(FRAME_HEADER_BYTES - this.#headerLen, b.length - i);
      const h = this.#header;
      for (let k = 0; k < take; k++) h[this.#headerLen + k] = b[i + k]!;
      this.#headerLen += take;
      if (this.#headerLen === FRAME_HEADER_BYTES) {
        this.#headerLen = 0;
        this.#startFrame(h, 0, at);
      }
      return i + take;
    }
    const take = Math.min(this.#remaining, b.length - i);
    if (this.#keep) {
      if (take === this.#remaining && this.#type !== T_CONTINUATION && this.#type !== T_RST_STREAM && this.#flags & F_END_HEADERS && this.#blockLen === this.#frameStart && this.#frameStart === 0) {
        /* A whole header block in this call: decoded where it lies. */
        this.#inFrame = false;
        this.#remaining = 0;
        this.#headerBlockFrame(b, i, i + take, at);
        return i + take;
      }
      this.#append(b, i, take);
    }
    this.#remaining -= take;
    if (this.#remaining === 0) this.#frameDone(at);
    return i + take;
  }

  #append(b: Uint8Array, from: number, n: number): void {
    const need = this.#blockLen + n;
    if (need > this.#block.length) {
      const grown = new Uint8Array(Math.min(MAX_HEADER_BLOCK_BYTES, Math.max(need, 256, this.#block.length * 2)));
      grown.set(this.#block.subarray(0, this.#blockLen));
      this.#block = grown;
    }
    const block = this.#block;
    let at = this.#blockLen;
    if (n < 64) for (let k = 0; k < n; k++) block[at++] = b[from + k]!;
    else block.set(b.subarray(from, from + n), at);
    this.#blockLen = need;
  }

  #startFrame(h: Uint8Array, o: number, at: T): void {
    const length = (h[o]! << 16) | (h[o + 1]! << 8) | h[o + 2]!;
    const type = h[o + 3]!;
    if (length >= MAX_FRAME_BYTES) return this.#lose("frame length out of range");
    if (this.#blockStream !== 0 && type !== T_CONTINUATION) return this.#lose("a header block was interrupted");
    /* Header blocks are kept to be decoded; an RST_STREAM's 4 bytes for its error code. */
    const keep = type === T_HEADERS || type === T_CONTINUATION || type === T_PUSH_PROMISE || (type === T_RST_STREAM && length === 4);
    if (keep && this.#blockLen + length > MAX_HEADER_BLOCK_BYTES) return this.#lose("header block over the bound");
    this.#inFrame = true;
    this.#type = type;
    this.#flags = h[o + 4]!;
    this.#stream = ((h[o + 5]! & 0x7f) << 24) | (h[o + 6]! << 16) | (h[o + 7]! << 8) | h[o + 8]!;
    this.#remaining = length;
    this.#keep = keep;
    this.#frameStart = this.#blockLen;
    if (length === 0) this.#frameDone(at);
  }

  #frameDone(at: T): void {
    this.#inFrame = false;
    switch (this.#type) {
      case T_DATA:
        if (this.#flags & F_END_STREAM) this.sink.end(this.#stream, at);
        return;
      case T_RST_STREAM: {
        let code: number | undefined;
        if (this.#keep) {
          const b = this.#block;
          const o = this.#frameStart;
          code = ((b[o]! << 24) | (b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!) >>> 0;
          this.#blockLen = o;
        }
        this.sink.reset(this.#stream, code, at);
        return;
      }
      case T_HEADERS:
      case T_PUSH_PROMISE:
        /* A HEADERS frame opens a block: its payload is all #block holds. */
        this.#headerBlockFrame(this.#block, 0, this.#blockLen, at);
        return;
      case T_CONTINUATION:
        if (this.#blockStream === 0 || this.#blockStream !== this.#stream) return this.#lose("CONTINUATION without a header block");
        if (this.#flags & F_END_HEADERS) this.#blockDone(this.#block, 0, this.#blockLen, at);
        return;
      default:
        return;
    }
  }

  /** The payload `b[from, to)` of the HEADERS or PUSH_PROMISE frame just read: decoded, or kept for CONTINUATIONs. */
  #headerBlockFrame(b: Uint8Array, from: number, to: number, at: T): void {
    const flags = this.#flags;
    if (flags & F_PADDED) to -= from < to ? b[from++]! : 0;
    if (this.#type === T_HEADERS && flags & F_PRIORITY) from += 5;
    if (this.#type === T_PUSH_PROMISE) from += 4;
    if (from > to) return this.#lose("padding longer than the frame");
    this.#blockStream = this.#stream;
    this.#blockEndStream = this.#type === T_HEADERS && (flags & F_END_STREAM) !== 0;
    this.#blockPush = this.#type === T_PUSH_PROMISE;
    if (flags & F_END_HEADERS) return this.#blockDone(b, from, to, at);
    /* CONTINUATIONs follow: the fragment moves to the start of #block (where it already is, but for its prefix). */
    if (b !== this.#block) {
      this.#blockLen = 0;
      this.#append(b, from, to - from);
    } else {
      this.#block.copyWithin(0, from, to);
      this.#blockLen = to - from;
    }
  }

  /** A whole header block `b[from, to)`: through the HPACK decoder, then to the sink. */
  #blockDone(b: Uint8Array, from: number, to: number, at: T): void {
    const stream = this.#blockStream;
    const push = this.#blockPush;
    this.#blockStream = 0;
    try {
      this.#hpack.decode(b, from, to, this.#fields);
    } catch (e) {
      if (!(e instanceof HpackError)) throw e;
      return this.#lose(`HPACK: ${e.message}`);
    } finally {
      this.#blockLen = 0;
      /* A large block's buffer is not kept for the connection's life. */
      if (this.#block.length > SMALL_BLOCK_BYTES) this.#block = EMPTY;
    }
    if (!push) this.sink.headers(stream, this.#fields, this.#blockEndStream, at);
  }
}

/** An HTTP/2 stream that completed: request and response heads as for HTTP/1 (version "2"), `scheme`, gRPC details. */
export type H2Exchange<M> = HttpExchange<M>;

/**
 * One open stream, which becomes its exchange when it completes (one object per stream: the exchange's fields are
 * filled in at the end; the request head is shared with the connection's streams that sent the same one).
 */
class H2Stream<M> implements HttpExchange<M> {
  role: "server" | "client";
  response: HttpResponseHead = NO_RESPONSE;
  endNs = 0n;
  rpc: RpcInfo | undefined = undefined;
  status: number | undefined = undefined;
  grpcStatus: number | undefined = undefined;
  /**
   * Decoded from a connection's middle: a POST to a `/service/method` path whose content-type may be among the
   * fields named by entries from before (H2Connection.midstream). A gRPC call if its response is a 200 that ends on a
   * header block (trailers, or a trailers-only response), as every gRPC response does.
   */
  grpcByShape = false;
  /** A header block of the response named fields by entries from before (its grpc-status may be one of them). */
  responseUnknown = false;
  /** A gRPC request's grpc-timeout in nanoseconds (undefined: none, or not one). */
  timeoutNs: bigint | undefined = undefined;

  constructor(
    /** The stream's id. */
    public id: number,
    /** The direction (Io) the request travelled. */
    public requestIo: 0 | 1,
    public request: HttpRequestHead,
    public scheme: string | undefined,
    public grpc: boolean,
    public startNs: bigint,
    public meta: M,
  ) {
    this.role = requestIo === 0 ? "server" : "client";
  }

  /** Makes a released stream (H2StreamPool) a new one, as the constructor would. */
  reuse(id: number, requestIo: 0 | 1, request: HttpRequestHead, scheme: string | undefined, grpc: boolean, startNs: bigint, meta: M): this {
    this.id = id;
    this.requestIo = requestIo;
    this.request = request;
    this.scheme = scheme;
    this.grpc = grpc;
    this.startNs = startNs;
    this.meta = meta;
    this.role = requestIo === 0 ? "server" : "client";
    this.response = NO_RESPONSE;
    this.endNs = 0n;
    this.rpc = undefined;
    this.status = undefined;
    this.grpcStatus = undefined;
    this.grpcByShape = false;
    this.responseUnknown = false;
    this.timeoutNs = undefined;
    return this;
  }
}

/** Streams kept for reuse at most (H2StreamPool). */
const POOLED_STREAMS = 1024;

/**
 * Completed streams handed back once nothing refers to them any more (ExchangeTracker.release: an exchange counted
 * and not made a span), made into the next streams: one object fewer per HTTP/2 request for the collector to
 * allocate and the heap to collect, at tens of thousands of requests a second.
 */
export class H2StreamPool {
  readonly #free: Array<H2Stream<unknown>> = [];

  /** Takes `x` back when it is a completed HTTP/2 stream; the caller refers to it no more. */
  release(x: HttpExchange<unknown>): void {
    if (x instanceof H2Stream && this.#free.length < POOLED_STREAMS) this.#free.push(x);
  }

  /** A stream: a released one made new, else a new one. */
  take<M>(id: number, requestIo: 0 | 1, request: HttpRequestHead, scheme: string | undefined, grpc: boolean, startNs: bigint, meta: M): H2Stream<M> {
    const s = this.#free.pop() as H2Stream<M> | undefined;
    return s ? s.reuse(id, requestIo, request, scheme, grpc, startNs, meta) : new H2Stream<M>(id, requestIo, request, scheme, grpc, startNs, meta);
  }
}

/** The response head of a stream with `:status` `status` (undefined: none seen), shared by every stream that got it. */
const NO_RESPONSE: HttpResponseHead = Object.freeze({ kind: "response", status: 0, version: "2", complete: false });
const responseHeads = new Map<number, HttpResponseHead>();
function responseHead(status: number | undefined): HttpResponseHead {
  if (status === undefined) return NO_RESPONSE;
  let h = responseHeads.get(status);
  if (h === undefined) {
    h = Object.freeze({ kind: "response", status, version: "2", complete: true });
    /* Statuses are 3-digit numbers in practice; anything else is not remembered. */
    if (Number.isInteger(status) && status >= 100 && status < 1000) responseHeads.set(status, h);
  }
  return h;
}

export interface H2Counters {
  /** Directions whose HPACK state was lost (bytes missing or undecodable): their streams give nothing more. */
  lostDirections: number;
  /** Directions the kernel stopped forwarding (its per-second limit or ring pressure): their streams give nothing more. */
  stoppedDirections: number;
  /** Streams forgotten unanswered: reset before a response, over MAX_OPEN_STREAMS, or open at close. */
  unanswered: number;
}

/**
 * The gRPC status of a call whose stream was reset by an RST_STREAM of error `code` before its response (the gRPC
 * HTTP/2 protocol's mapping, PROTOCOL-HTTP2.md "Errors"): CANCEL -> CANCELLED, REFUSED_STREAM -> UNAVAILABLE,
 * ENHANCE_YOUR_CALM -> RESOURCE_EXHAUSTED, INADEQUATE_SECURITY -> PERMISSION_DENIED, any other -> INTERNAL.
 */
export function grpcStatusOfReset(code: number | undefined): number {
  switch (code) {
    case 0x8:
      return 1;
    case 0x7:
      return 14;
    case 0xb:
      return 8;
    case 0xc:
      return 7;
    default:
      return 13;
  }
}

/**
 * How much earlier than its grpc-timeout a call's CANCEL may come and still be its deadline: the client computes the
 * timeout before its library writes the request, which a busy event loop may delay by milliseconds.
 */
const DEADLINE_SLACK_NS = 10_000_000n;
const TIMEOUT_UNIT_NS: Record<string, bigint> = { H: 3_600_000_000_000n, M: 60_000_000_000n, S: 1_000_000_000n, m: 1_000_000n, u: 1_000n, n: 1n };

/** A grpc-timeout value (1 to 8 digits and a unit: H, M, S, m, u, n) in nanoseconds; undefined when malformed. */
export function grpcTimeoutNs(value: string): bigint | undefined {
  const m = /^(\d{1,8})([HMSmun])$/.exec(value);
  return m ? BigInt(m[1]!) * TIMEOUT_UNIT_NS[m[2]!]! : undefined;
}

/** `/pkg.Service/Method` -> service and method (undefined when the path has another shape). */
export function grpcNames(path: string): { service: string; method: string } | undefined {
  const m = /^\/([^/]+)\/([^/]+)$/.exec(path);
  return m ? { service: m[1]!, method: m[2]! } : undefined;
}

/** Slots of a connection's open-stream table before it first grows. */
const FIRST_STREAM_SLOTS = 8;

/**
 * A connection's open streams by id: slots indexed by the id's bits above the lowest (ids of one side go up by 2), a
 * power of two of them, doubled when a new stream's slot holds another open stream, up to MAX_OPEN_STREAMS slots. At
 * that size a stream still open in the new one's slot (a long-lived one, 256 streams older) moves to a Map beside
 * the slots, while fewer than MAX_OPEN_STREAMS are open; otherwise it is displaced, forgotten. A Map's set and delete
 * per stream cost ~80 ns here against ~8 for the slots, and half the HTTP/2 path's CPU in the replay
 * (bench/lib/h2-replay.ts).
 */
class OpenStreams<S extends { readonly id: number }> {
  #slots: Array<S | undefined> = new Array<S | undefined>(FIRST_STREAM_SLOTS).fill(undefined);
  #mask = FIRST_STREAM_SLOTS - 1;
  /** Long-lived streams moved out of the slots (see above). */
  readonly #aside = new Map<number, S>();
  size = 0;

  get(id: number): S | undefined {
    const s = this.#slots[(id >>> 1) & this.#mask];
    if (s !== undefined && s.id === id) return s;
    return this.#aside.size > 0 ? this.#aside.get(id) : undefined;
  }

  /** Adds `s` (whose id is not open); returns the older stream it displaced, if any. */
  add(s: S): S | undefined {
    let i = (s.id >>> 1) & this.#mask;
    while (this.#slots[i] !== undefined && this.#slots.length < MAX_OPEN_STREAMS) {
      this.#grow();
      i = (s.id >>> 1) & this.#mask;
    }
    const old = this.#slots[i];
    this.#slots[i] = s;
    if (old === undefined) {
      this.size++;
      return undefined;
    }
    if (this.size < MAX_OPEN_STREAMS) {
      this.#aside.set(old.id, old);
      this.size++;
      return undefined;
    }
    return old;
  }

  delete(id: number): void {
    const i = (id >>> 1) & this.#mask;
    const s = this.#slots[i];
    if (s !== undefined && s.id === id) {
      this.#slots[i] = undefined;
      this.size--;
    } else if (this.#aside.delete(id)) {
      this.size--;
    }
  }

  clear(): void {
    this.#slots.fill(undefined);
    this.#aside.clear();
    this.size = 0;
  }

  /** Doubles the slots: two streams apart in the smaller table are apart in the larger. */
  #grow(): void {
    const slots = new Array<S | undefined>(this.#slots.length * 2).fill(undefined);
    const mask = slots.length - 1;
    for (const s of this.#slots) if (s !== undefined) slots[(s.id >>> 1) & mask] = s;
    this.#slots = slots;
    this.#mask = mask;
  }
}

/** Both directions of one HTTP/2 connection and its open streams. */
export class H2Connection<M> {
  readonly directions: [H2Direction<bigint>, H2Direction<bigint>];
  readonly #streams = new OpenStreams<H2Stream<M>>();
  /* The call being fed: its direction, meta and where its completed exchanges go. */
  #io: 0 | 1 = 0;
  #meta: M | undefined;
  #done: Array<H2Exchange<M>> | undefined;
  /** The last request head made, and the last content-type seen with whether it is gRPC (a client sends the same ones again and again). */
  #lastRequest: HttpRequestHead | undefined;
  #lastContentType: string | undefined;
  #lastGrpc = false;
  /** The last :status text seen and its number. */
  #lastStatusText: string | undefined;
  #lastStatus = 0;
  /**
   * Decoded from its middle (midstream): the direction requests travel once a block told (a :method, or a :status
   * the other way), and the highest stream id of a header block seen, below which a block without a :method opens
   * no stream (it may belong to a stream opened before decoding began).
   */
  #partial = false;
  #requestIo: 0 | 1 | undefined;
  #highestStream = 0;

  constructor(
    private readonly counters: H2Counters,
    private readonly pool = new H2StreamPool(),
    /** Called with each stream opened. */
    private readonly opened?: (s: H2Stream<M>) => void,
  ) {
    const sink: H2Sink<bigint> = {
      headers: (stream, fields, endStream, at) => this.#headers(stream, fields, endStream, at),
      end: (stream, at) => {
        const s = this.#streams.get(stream);
        if (!s || s.requestIo === this.#io) return;
        /* A response that ends on DATA is no gRPC response. */
        s.grpcByShape = false;
        this.#finish(s, at);
      },
      reset: (stream, code, at) => {
        const s = this.#streams.get(stream);
        if (!s) return;
        if (s.status !== undefined) this.#finish(s, at);
        else if ((s.grpc || s.grpcByShape) && s.grpcStatus === undefined) {
          /* A gRPC call reset before its response (a client's cancel or deadline, a refused stream): it ended, with
           * the status gRPC gives a reset of that code; no HTTP status. */
          s.status = STATUS_UNKNOWN;
          s.grpcStatus = grpcStatusOfReset(code);
          /* A client resets with CANCEL at its deadline: reset at or after the grpc-timeout it sent (DEADLINE_SLACK_NS
           * early at most), the call is DEADLINE_EXCEEDED, as the client reports it. */
          if (code === 0x8 && s.timeoutNs !== undefined && at - s.startNs >= s.timeoutNs - DEADLINE_SLACK_NS) s.grpcStatus = 4;
          this.#finish(s, at);
        } else {
          /* An HTTP request reset before an answer: counted in the RED metrics (STATUS_RESET), no span (unanswered). */
          this.counters.unanswered++;
          s.status = STATUS_RESET;
          this.#finish(s, at);
        }
      },
    };
    this.directions = [new H2Direction(sink), new H2Direction(sink)];
  }

  /**
   * Feeds one call of direction `io`; the exchanges it completed are appended to `done` (made when undefined and
   * one completed), which is returned.
   */
  push(io: 0 | 1, offset: number, length: number, data: Uint8Array, atNs: bigint, meta: M, done: Array<H2Exchange<M>> | undefined): Array<H2Exchange<M>> | undefined {
    const dir = this.directions[io];
    if (dir.lost !== undefined) return done;
    this.#io = io;
    this.#meta = meta;
    this.#done = done;
    dir.push(offset, length, data, atNs);
    this.#meta = undefined;
    done = this.#done;
    this.#done = undefined;
    if (dir.lost !== undefined) this.counters.lostDirections++;
    return done;
  }

  #headers(stream: number, f: HeaderFields, endStream: boolean, at: bigint): void {
    const io = this.#io;
    const s = this.#streams.get(stream);
    if (!s) {
      let method = f[F_METHOD];
      if (this.#partial) {
        const highest = this.#highestStream;
        if (stream > highest) this.#highestStream = stream;
        if (method !== undefined) this.#requestIo = io;
        else if (f[F_STATUS] !== undefined) this.#requestIo = io === 0 ? 1 : 0;
        /* A new client stream whose :method is in the part of the table from before (PUT, DELETE ... once indexed). */
        else if (io === this.#requestIo && stream > highest && (stream & 1) === 1 && this.directions[io].unknownFields > 0) method = "_OTHER";
      }
      if (method === undefined) return;
      const contentType = f[F_CONTENT_TYPE];
      if (contentType !== this.#lastContentType) {
        this.#lastContentType = contentType;
        this.#lastGrpc = (contentType ?? "").startsWith("application/grpc");
      }
      const opened = this.pool.take<M>(stream, io, this.#requestHead(method, f[F_PATH] ?? "", f[F_AUTHORITY], f[F_TRACEPARENT]), f[F_SCHEME], this.#lastGrpc, at, this.#meta as M);
      if (this.#partial && contentType === undefined && method === "POST" && this.directions[io].unknownFields > 0) opened.grpcByShape = grpcNames(opened.request.path ?? "") !== undefined;
      const timeout = f[F_GRPC_TIMEOUT];
      if (timeout !== undefined) opened.timeoutNs = grpcTimeoutNs(timeout);
      this.opened?.(opened);
      const displaced = this.#streams.add(opened);
      if (displaced !== undefined) this.counters.unanswered++;
      return;
    }
    if (s.requestIo === io) return; /* request trailers */
    const status = f[F_STATUS];
    if (status !== undefined && s.status === undefined) {
      if (status !== this.#lastStatusText) {
        this.#lastStatusText = status;
        this.#lastStatus = Number(status);
      }
      const n = this.#lastStatus;
      if (n >= 100 && n < 200) return; /* interim responses */
      s.status = n;
      if (n !== 200) s.grpcByShape = false;
    }
    if (this.#partial && this.directions[io].unknownFields > 0) s.responseUnknown = true;
    const gs = f[F_GRPC_STATUS];
    if (gs !== undefined && /^\d+$/.test(gs)) s.grpcStatus = Number(gs);
    if (endStream) this.#finish(s, at);
  }

  /**
   * The request head of `method`, `target`, `host` and `traceparent`: the last one made when they are the same (a
   * client repeats itself; a traceparent differs from call to call).
   */
  #requestHead(method: string, target: string, host: string | undefined, traceparent: string | undefined): HttpRequestHead {
    const last = this.#lastRequest;
    if (last !== undefined && last.method === method && last.target === target && last.host === host && last.traceparent === traceparent) return last;
    const fields = { kind: "request", method, target, path: method === "CONNECT" ? undefined : pathOfTarget(target), version: "2", host, complete: true } as const;
    const request: HttpRequestHead = Object.freeze(traceparent === undefined ? fields : { ...fields, traceparent });
    this.#lastRequest = request;
    return request;
  }

  #finish(s: H2Stream<M>, endNs: bigint): void {
    this.#streams.delete(s.id);
    /* Decoded from the middle, a :status named by an entry from before (a 201, a 503 once indexed): unknown, not 0. */
    if (s.status === undefined && this.#partial) s.status = STATUS_UNKNOWN;
    s.response = responseHead(s.status);
    s.endNs = endNs;
    if (s.role === "server") s.meta = this.#meta as M;
    if (s.grpc || s.grpcByShape) {
      const names = grpcNames(s.request.path ?? "");
      /* No grpc-status decoded where the response named fields by entries from before: unknown, not missing. */
      const statusCode = s.grpcStatus ?? (s.responseUnknown ? STATUS_UNKNOWN : undefined);
      if (names) s.rpc = { system: "grpc", service: names.service, method: names.method, statusCode };
    }
    (this.#done ??= []).push(s);
  }

  /**
   * The connection was upgraded from HTTP/1.1 (h2c, RFC 9113 section 3.2): `request`, which travelled in direction
   * `requestIo` at `startNs`, is stream 1, answered in HTTP/2 (reported with version "2" and scheme http); each
   * direction's frames start at its offset in `startAt` (the response's after the 101's head, the request's after the
   * request). Called before the directions' first calls.
   */
  upgraded(request: HttpRequestHead, requestIo: 0 | 1, startNs: bigint, meta: M, startAt: readonly [number, number]): void {
    this.directions[0].startAt(startAt[0]);
    this.directions[1].startAt(startAt[1]);
    this.#streams.add(new H2Stream<M>(1, requestIo, { ...request, version: "2" }, "http", false, startNs, meta));
  }

  /**
   * The connection was open before the agent looked at it (the kernel found HTTP/2 frames in its middle): each
   * direction starts at its first call that starts with frames, its HPACK table partial (H2Direction.startMidstream).
   * A field named by an entry from before is unknown: a request without its :path has no url.path nor http.route, one
   * without its :method (on a new stream, in the direction requests travel) has method `_OTHER`; a response without
   * its :status has status STATUS_UNKNOWN. A POST to a `/service/method` path without its content-type is a gRPC
   * call when its response is a 200 that ends on a header block (trailers, or trailers only), as gRPC responses
   * always do and others seldom; a call whose grpc-status was not decoded there has status STATUS_UNKNOWN (not an
   * error). Streams open when decoding began are not reported. Before the first call.
   */
  midstream(): void {
    this.#partial = true;
    this.directions[0].startMidstream();
    this.directions[1].startMidstream();
  }

  /** The kernel stopped forwarding the connection: both directions stop decoding, counted as stopped. */
  stop(): void {
    this.stopped = true;
    for (const dir of this.directions) if (dir.stop("the kernel stopped forwarding the connection (HTTP/2 record limit or ring pressure)")) this.counters.stoppedDirections++;
  }

  /** The kernel stopped forwarding the connection (stop). */
  stopped = false;

  /** A direction cannot be decoded further (bytes it needed were not forwarded, or did not decode). */
  get lostDirection(): boolean {
    return this.directions[0].lost !== undefined || this.directions[1].lost !== undefined;
  }

  /** The connection closed: streams still open are counted as unanswered. */
  close(): void {
    this.counters.unanswered += this.#streams.size;
    this.#streams.clear();
  }
}
