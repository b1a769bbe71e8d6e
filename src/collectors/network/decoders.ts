/**
 * Pure decoders of the `network` set's ring buffer records (ffi/bpf/network.bpf.c): `struct conn_event` on
 * `conn_events` and `struct http_event` on `http_events`. Offsets are those of the C structs (asserted there
 * with _Static_assert). Little-endian.
 */
import { formatAddress } from "./addresses";

export const CONN_EVENT_BYTES = 160;
export const HTTP_EVENT_HEADER_BYTES = 104;
/** HTTP_CAPTURE_BYTES in the C program: the most bytes captured per call. */
export const HTTP_CAPTURE_BYTES = 256;
/** H2_CAPTURE_BYTES in the C program: the most bytes forwarded of one call on an HTTP/2 connection. */
export const H2_CAPTURE_BYTES = 4096;

export const ConnKind = { OPEN: 1, FAILED: 2, CLOSED: 3, PROGRESS: 4 } as const;
export type ConnKindValue = (typeof ConnKind)[keyof typeof ConnKind];
export const Direction = { UNKNOWN: 0, OUTBOUND: 1, INBOUND: 2 } as const;
export type DirectionValue = (typeof Direction)[keyof typeof Direction];
export const ConnFlag = { OPEN_REPORTED: 1, IGNORED: 2, PREEXISTING: 4 } as const;

/** struct conn, at `base` within the record. */
const CONN = {
  startNs: 0, establishedNs: 8, bytesSent: 16, bytesRecv: 24, cgroupId: 32, pid: 40, retransmits: 44,
  sport: 48, dport: 50, family: 52, direction: 54, flags: 55, saddr: 56, daddr: 72, comm: 88, reportedSent: 112, reportedRecv: 120,
} as const;
const CONN_EVENT = { timestampNs: 0, sk: 8, kind: 16, conn: 24 } as const;
const HTTP = {
  timestampNs: 0, sk: 8, streamOffset: 16, cgroupId: 24, pid: 32, tid: 36, len: 40, captured: 44, io: 46, direction: 47,
  sport: 48, dport: 50, family: 52, flags: 54, saddr: 56, daddr: 72, comm: 88, data: 104,
} as const;
/** struct http_event.flags (HTTP_EVENT_* in the C program). */
export const HttpEventFlag = { H2_STOPPED: 1, H2_MIDSTREAM: 2, H2_RESUMED: 4 } as const;

export const AF_INET = 2;
export const AF_INET6 = 10;

export interface ConnEvent {
  type: "conn";
  kind: ConnKindValue;
  timestampNs: bigint;
  /** Kernel address of the socket (identity while it lives). */
  sk: bigint;
  startNs: bigint;
  /** 0n when the connection never got established. */
  establishedNs: bigint;
  bytesSent: number;
  bytesRecv: number;
  /** Bytes already counted by earlier PROGRESS records (count bytesSent - reportedSent now). */
  reportedSent: number;
  reportedRecv: number;
  cgroupId: bigint;
  /** 0 when the owning process was never seen. */
  pid: number;
  retransmits: number;
  localAddress: string;
  localPort: number;
  remoteAddress: string;
  remotePort: number;
  family: number;
  direction: DirectionValue;
  flags: number;
  comm: string;
}

/** The endpoints, task and captured bytes of a read or write: a socket's (http_event) or TLS plaintext's (tls/decoder.ts). */
export interface CapturedCall {
  localAddress: string;
  localPort: number;
  remoteAddress: string;
  remotePort: number;
  family: number;
  comm: string;
  /** The captured first bytes (a copy). */
  data: Uint8Array;
}

export interface HttpEvent extends CapturedCall {
  readonly type: "http";
  /** `known` when this record's endpoint (process, task name, addresses, ports) is the same, else a new one, kept beyond the record. */
  endpointOr(known: HttpEndpoint | undefined): HttpEndpoint;
  timestampNs: bigint;
  sk: bigint;
  /** sk's low and high 32-bit words (a key without a BigInt). */
  skLow: number;
  skHigh: number;
  streamOffset: number;
  cgroupId: bigint;
  pid: number;
  tid: number;
  /** Bytes moved by the call. */
  length: number;
  io: 0 | 1;
  direction: DirectionValue;
  /**
   * HttpEventFlag bits: H2_STOPPED, a header-only record saying the kernel stopped forwarding this HTTP/2 connection;
   * H2_MIDSTREAM, a call of an HTTP/2 connection the kernel found in its middle (open before the programs loaded);
   * H2_RESUMED, the first call forwarded of a stopped HTTP/2 connection the kernel forwards again, or the first that
   * starts with frames after a call forwarded cut (and the further records of that call).
   */
  flags: number;
}

export type NetworkEvent = ConnEvent | HttpEvent;

/** A NUL-terminated string in a fixed-size field, one character per byte. */
export function cString(view: DataView, at: number, max: number): string {
  let s = "";
  for (let i = 0; i < max; i++) {
    const c = view.getUint8(at + i);
    if (c === 0) break;
    s += String.fromCharCode(c);
  }
  return s;
}

/**
 * The text of an address field (16 bytes; IPv4 in the first 4): IPv4 and IPv4-mapped IPv6 addresses from the cache
 * of dotted quads, with no view or string made for an address seen before (connection events come by the tens of
 * thousands a second under a connect storm, each with two addresses).
 */
function addr(view: DataView, at: number, family: number): string {
  if (family === AF_INET) return dottedQuad(view.getUint32(at, false));
  if (view.getUint32(at, true) === 0 && view.getUint32(at + 4, true) === 0 && view.getUint32(at + 8, false) === 0xffff) return dottedQuad(view.getUint32(at + 12, false));
  return formatAddress(new Uint8Array(view.buffer, view.byteOffset + at, 16), family);
}

export function decodeConnEvent(view: DataView, offset: number, length: number): ConnEvent {
  if (length < CONN_EVENT_BYTES) throw new RangeError(`conn_event: ${length} bytes, need ${CONN_EVENT_BYTES}`);
  const b = offset + CONN_EVENT.conn;
  const family = view.getUint16(b + CONN.family, true);
  return {
    type: "conn",
    kind: view.getUint32(offset + CONN_EVENT.kind, true) as ConnKindValue,
    timestampNs: view.getBigUint64(offset + CONN_EVENT.timestampNs, true),
    sk: view.getBigUint64(offset + CONN_EVENT.sk, true),
    startNs: view.getBigUint64(b + CONN.startNs, true),
    establishedNs: view.getBigUint64(b + CONN.establishedNs, true),
    bytesSent: Number(view.getBigUint64(b + CONN.bytesSent, true)),
    bytesRecv: Number(view.getBigUint64(b + CONN.bytesRecv, true)),
    reportedSent: Number(view.getBigUint64(b + CONN.reportedSent, true)),
    reportedRecv: Number(view.getBigUint64(b + CONN.reportedRecv, true)),
    cgroupId: view.getBigUint64(b + CONN.cgroupId, true),
    pid: view.getUint32(b + CONN.pid, true),
    retransmits: view.getUint32(b + CONN.retransmits, true),
    localPort: view.getUint16(b + CONN.sport, true),
    remotePort: view.getUint16(b + CONN.dport, true),
    family,
    direction: view.getUint8(b + CONN.direction) as DirectionValue,
    flags: view.getUint8(b + CONN.flags),
    localAddress: addr(view, b + CONN.saddr, family),
    remoteAddress: addr(view, b + CONN.daddr, family),
    comm: commOf(view.getUint32(b + CONN.comm, true), view.getUint32(b + CONN.comm + 4, true), view.getUint32(b + CONN.comm + 8, true), view.getUint32(b + CONN.comm + 12, true)),
  };
}

/** The data of a record with none (or no more: releaseData). */
const NO_DATA = new Uint8Array(0);

/** The text of IPv4 addresses seen (a host talks with few; emptied when full). */
const DOTTED_QUADS_KEPT = 4096;
const dottedQuads = new Map<number, string>();

/** An IPv4 address read as a big-endian number, as formatAddress writes it. */
function dottedQuad(n: number): string {
  let s = dottedQuads.get(n);
  if (s === undefined) {
    if (dottedQuads.size >= DOTTED_QUADS_KEPT) dottedQuads.clear();
    s = `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
    dottedQuads.set(n, s);
  }
  return s;
}

/** Task names by their 16 bytes (four little-endian words), direct-mapped: the last name seen in each slot. */
const COMM_SLOTS = 64;
const commWords = new Uint32Array(COMM_SLOTS * 4);
const commNames: Array<string | undefined> = new Array<string | undefined>(COMM_SLOTS).fill(undefined);

/** As cString over the four words: the bytes up to the first NUL, one character each. */
function commOf(w0: number, w1: number, w2: number, w3: number): string {
  const slot = (w0 ^ Math.imul(w1, 31) ^ Math.imul(w2, 961) ^ w3) & (COMM_SLOTS - 1);
  const at = slot * 4;
  const known = commNames[slot];
  if (known !== undefined && commWords[at] === w0 && commWords[at + 1] === w1 && commWords[at + 2] === w2 && commWords[at + 3] === w3) return known;
  const words = [w0, w1, w2, w3];
  let s = "";
  for (let i = 0; i < 16; i++) {
    const c = (words[i >> 2]! >>> ((i & 3) * 8)) & 255;
    if (c === 0) break;
    s += String.fromCharCode(c);
  }
  commWords[at] = w0;
  commWords[at + 1] = w1;
  commWords[at + 2] = w2;
  commWords[at + 3] = w3;
  commNames[slot] = s;
  return s;
}

/**
 * What an http_event says about its socket's endpoint: process, task name, addresses and ports. The address and
 * task-name strings are made only when first asked for, then kept (most records never become spans; a span reads
 * the addresses several times).
 */
class EndpointFields {
  pid = 0;
  localPort = 0;
  remotePort = 0;
  family = 0;
  /** IPv4: the addresses as read (network byte order, as a big-endian number). */
  protected saddr4 = 0;
  protected daddr4 = 0;
  /** Other families: saddr and daddr (16 bytes each), in an array of the object's own. */
  protected addresses: Uint8Array | undefined;
  /** The task name's 16 bytes as four little-endian words. */
  protected comm0 = 0;
  protected comm1 = 0;
  protected comm2 = 0;
  protected comm3 = 0;
  #localAddress: string | undefined;
  #remoteAddress: string | undefined;
  #comm: string | undefined;

  get localAddress(): string {
    return (this.#localAddress ??= this.family !== AF_INET && this.addresses ? formatAddress(this.addresses.subarray(0, 16), this.family) : dottedQuad(this.saddr4));
  }

  get remoteAddress(): string {
    return (this.#remoteAddress ??= this.family !== AF_INET && this.addresses ? formatAddress(this.addresses.subarray(16, 32), this.family) : dottedQuad(this.daddr4));
  }

  /** As cString: the bytes up to the first NUL, one character each. */
  get comm(): string {
    return (this.#comm ??= commOf(this.comm0, this.comm1, this.comm2, this.comm3));
  }

  /** Forgets the strings made (the fields were read again). */
  protected forgetStrings(): void {
    this.#localAddress = undefined;
    this.#remoteAddress = undefined;
    this.#comm = undefined;
  }

  /** Sets the endpoint fields to `o`'s (its strings too, when made). */
  protected copyEndpoint(o: EndpointFields): void {
    this.pid = o.pid;
    this.localPort = o.localPort;
    this.remotePort = o.remotePort;
    this.family = o.family;
    this.saddr4 = o.saddr4;
    this.daddr4 = o.daddr4;
    this.addresses = o.family !== AF_INET ? o.addresses?.slice() : undefined;
    this.comm0 = o.comm0;
    this.comm1 = o.comm1;
    this.comm2 = o.comm2;
    this.comm3 = o.comm3;
    this.#localAddress = o.#localAddress;
    this.#remoteAddress = o.#remoteAddress;
    this.#comm = o.#comm;
  }

  /** Whether `o` has the same endpoint fields. */
  sameEndpoint(o: EndpointFields): boolean {
    if (o.pid !== this.pid || o.localPort !== this.localPort || o.remotePort !== this.remotePort || o.family !== this.family) return false;
    if (o.comm0 !== this.comm0 || o.comm1 !== this.comm1 || o.comm2 !== this.comm2 || o.comm3 !== this.comm3) return false;
    if (this.family === AF_INET) return o.saddr4 === this.saddr4 && o.daddr4 === this.daddr4;
    const a = this.addresses;
    const b = o.addresses;
    if (a === undefined || b === undefined) return a === b;
    for (let i = 0; i < 32; i++) if (a[i] !== b[i]) return false;
    return true;
  }
}

/**
 * The endpoint of a connection's records, kept beyond them (an exchange's meta): the network component keeps one
 * per connection while its records say the same (HttpEvent.endpointOr), so the strings are made once per connection.
 */
export class HttpEndpoint extends EndpointFields {
  /** What the span writer (http/spans.ts) keeps of this endpoint for its next spans: the endpoint never changes. */
  spanCache: unknown = undefined;

  constructor(of: EndpointFields) {
    super();
    this.copyEndpoint(of);
  }
}

/**
 * An http_event: numbers are read eagerly from the record as delivered, the captured bytes copied or viewed in place;
 * the endpoint's strings are made only when first asked for.
 */
class HttpEventRecord extends EndpointFields implements HttpEvent {
  readonly type = "http";
  timestampNs = 0n;
  skLow = 0;
  skHigh = 0;
  streamOffset = 0;
  tid = 0;
  length = 0;
  io: 0 | 1 = 0;
  direction: DirectionValue = Direction.UNKNOWN;
  /** The captured bytes: a copy (decodeHttpEvent), or the record's own bytes (decodeHttpEventReused). */
  data: Uint8Array = NO_DATA;
  flags = 0;
  /** The cgroup id as read, its low and high words (made a bigint only when asked for: the span path never does). */
  #cgroupLow = 0;
  #cgroupHigh = 0;

  /** The record at `offset` of `view` (`bytes`: the same memory as bytes), with `captured` bytes of data (copied when `copy`). */
  constructor(view?: DataView, offset = 0, bytes?: Uint8Array, captured = 0, copy = false) {
    super();
    if (view && bytes) this.fill(view, offset, bytes, captured, copy);
  }

  /** Reads the record at `offset` of `view` into this object (see the constructor). */
  fill(view: DataView, offset: number, bytes: Uint8Array, captured: number, copy: boolean): this {
    this.timestampNs = view.getBigUint64(offset + HTTP.timestampNs, true);
    this.skLow = view.getUint32(offset + HTTP.sk, true);
    this.skHigh = view.getUint32(offset + HTTP.sk + 4, true);
    this.streamOffset = view.getUint32(offset + HTTP.streamOffset, true) + view.getUint32(offset + HTTP.streamOffset + 4, true) * 2 ** 32;
    this.#cgroupLow = view.getUint32(offset + HTTP.cgroupId, true);
    this.#cgroupHigh = view.getUint32(offset + HTTP.cgroupId + 4, true);
    this.pid = view.getUint32(offset + HTTP.pid, true);
    this.tid = view.getUint32(offset + HTTP.tid, true);
    this.length = view.getUint32(offset + HTTP.len, true);
    this.io = (view.getUint8(offset + HTTP.io) & 1) as 0 | 1;
    this.direction = view.getUint8(offset + HTTP.direction) as DirectionValue;
    this.localPort = view.getUint16(offset + HTTP.sport, true);
    this.remotePort = view.getUint16(offset + HTTP.dport, true);
    this.family = view.getUint16(offset + HTTP.family, true);
    this.flags = view.getUint16(offset + HTTP.flags, true);
    const v4 = this.family === AF_INET;
    this.saddr4 = v4 ? view.getUint32(offset + HTTP.saddr, false) : 0;
    this.daddr4 = v4 ? view.getUint32(offset + HTTP.daddr, false) : 0;
    const at = view.byteOffset + offset;
    if (!v4) (this.addresses ??= new Uint8Array(32)).set(bytes.subarray(at + HTTP.saddr, at + HTTP.daddr + 16));
    this.comm0 = view.getUint32(offset + HTTP.comm, true);
    this.comm1 = view.getUint32(offset + HTTP.comm + 4, true);
    this.comm2 = view.getUint32(offset + HTTP.comm + 8, true);
    this.comm3 = view.getUint32(offset + HTTP.comm + 12, true);
    this.data = copy ? bytes.slice(at + HTTP.data, at + HTTP.data + captured) : bytes.subarray(at + HTTP.data, at + HTTP.data + captured);
    this.forgetStrings();
    return this;
  }

  /** Made only when asked for (the component keys connections by skLow and skHigh). */
  get sk(): bigint {
    return (BigInt(this.skHigh) << 32n) | BigInt(this.skLow);
  }

  get cgroupId(): bigint {
    return (BigInt(this.#cgroupHigh) << 32n) | BigInt(this.#cgroupLow);
  }

  endpointOr(known: HttpEndpoint | undefined): HttpEndpoint {
    return known !== undefined && this.sameEndpoint(known) ? known : new HttpEndpoint(this);
  }
}

/** A byte view of the ring buffer memory the last records came in (one per buffer, not one per record). */
let lastBuffer: ArrayBufferLike | undefined;
let lastBytes: Uint8Array | undefined;

function bytesOf(view: DataView): Uint8Array {
  const buffer = view.buffer;
  if (buffer !== lastBuffer || !lastBytes) {
    lastBuffer = buffer;
    lastBytes = new Uint8Array(buffer);
  }
  return lastBytes;
}

/** Decodes an http_event; the result owns a copy of what it keeps (the ring buffer's view is only valid during the call). */
export function decodeHttpEvent(view: DataView, offset: number, length: number): HttpEvent {
  return new HttpEventRecord(view, offset, bytesOf(view), checkedCapture(view, offset, length), true);
}

/** The one record decodeHttpEventReused fills. */
const reused = new HttpEventRecord();

/**
 * Decodes an http_event into one record object for every call, its `data` the record's own bytes in the ring
 * buffer, not a copy: the record is valid only until the next call, its bytes only while the record is handled (the
 * ring's pump hands each record to its handler during the walk, before the ring's consumer position moves past it).
 * The network component's http_events decoder: it feeds the bytes to the HTTP parsers, which copy what they keep, and
 * keeps the endpoint per connection (HttpEvent.endpointOr), never the record (no object per record).
 */
export function decodeHttpEventReused(view: DataView, offset: number, length: number): HttpEvent {
  return reused.fill(view, offset, bytesOf(view), checkedCapture(view, offset, length), false);
}

/** Empties the data of a record decoded in place once it was handled (a test may keep the record; the ring's bytes it may not). */
export function releaseData(e: HttpEvent): void {
  e.data = NO_DATA;
}

/** The captured byte count of the http_event at `offset`, checked against the record's length. */
function checkedCapture(view: DataView, offset: number, length: number): number {
  if (length < HTTP_EVENT_HEADER_BYTES) throw new RangeError(`http_event: ${length} bytes, need ${HTTP_EVENT_HEADER_BYTES}`);
  const captured = view.getUint16(offset + HTTP.captured, true);
  if (captured > H2_CAPTURE_BYTES || HTTP_EVENT_HEADER_BYTES + captured > length) {
    throw new RangeError(`http_event: ${captured} captured bytes do not fit a ${length}-byte record`);
  }
  return captured;
}
