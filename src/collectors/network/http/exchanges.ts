/**
 * Pairs HTTP requests with their responses per connection. Each connection has one parser per direction;
 * a request read by a process makes it the server of that exchange, a request written makes it the client.
 * Responses answer the oldest unanswered request (HTTP/1.x answers in order, also when pipelined). An exchange
 * is complete when its response ends: at the call carrying the response's last byte, as the parser finds it;
 * a response whose end cannot be found ends at its last call seen when the next one starts, when the
 * connection closes (`close`), or when the connection has been quiet for a while (`flushIdle`).
 * A connection whose first bytes in a direction open HTTP/2 (client preface or SETTINGS) goes to an H2Connection
 * instead (./h2): each stream is one exchange, with the same request/response heads (version "2"). So does one
 * whose request asked for `Upgrade: h2c` and got 101: that request becomes stream 1 (RFC 9113 section 3.2), and the
 * 101 is no exchange of its own. One whose calls the kernel found to be HTTP/2 frames in its middle (a connection
 * open before it looked: CapturedCall.h2Midstream) goes to an H2Connection decoding from there (midstream), and so
 * does one whose forwarding the kernel stopped and then resumed (CapturedCall.h2Resumed).
 * Bounded: at most `maxConnections` connections (least recently used evicted) and `maxPendingPerConnection`
 * unanswered requests each. Pure apart from the timestamps the caller passes.
 */
import { H2Connection, H2StreamPool, isH2Opening, type H2Counters } from "./h2";
import { HttpStreamParser, type HttpExchange, type HttpRequestHead, type HttpResponseHead } from "./parser";

export const DEFAULT_MAX_CONNECTIONS = 4096;
export const DEFAULT_MAX_PENDING_PER_CONNECTION = 32;

/** Which side moved the bytes: the process read them (0) or wrote them (1). */
export type Io = 0 | 1;
export const IO_READ: Io = 0;
export const IO_WRITE: Io = 1;

/** One captured read or write on a TCP socket (see ffi/bpf/network.bpf.c struct http_event). */
export interface CapturedCall<M = unknown> {
  /** Identity of the connection within the host (pid and socket address). */
  connection: string;
  io: Io;
  /** Kernel monotonic ns of the call. */
  timestampNs: bigint;
  streamOffset: number;
  length: number;
  data: Uint8Array;
  /** Whatever describes the endpoint (process, addresses); handed back with the exchange. */
  meta: M;
  /** No bytes: the kernel stopped forwarding this HTTP/2 connection here (its per-second limit or ring pressure). */
  h2Stopped?: boolean;
  /** A call of an HTTP/2 connection the kernel found in its middle (opened before it looked): H2Connection.midstream. */
  h2Midstream?: boolean;
  /**
   * The first call forwarded of an HTTP/2 connection the kernel had stopped (h2Stopped) and forwards again, or the
   * first that starts with frames after a call forwarded cut, and the further records of that call: the connection
   * is decoded anew from it where it cannot go on, as one found in its middle.
   */
  h2Resumed?: boolean;
}

/**
 * A message started in one direction whose end is awaited: the exchange (its endNs set when it ends) when it is a
 * response answering a request, else undefined.
 */
type Started<M> = HttpExchange<M> | undefined;

interface Pending<M> {
  request: HttpRequestHead;
  io: Io;
  atNs: bigint;
  meta: M;
}

class ConnectionState<M> {
  /** The connection's key in the tracker. */
  readonly key: string;
  /** The connections used just before and just after this one (the tracker's recency list). */
  older: ConnectionState<M> | undefined;
  newer: ConnectionState<M> | undefined;
  readonly pending: Array<Pending<M>> = [];
  /** Messages started and not ended, per direction (Io), oldest first. */
  readonly started: [Array<Started<M>>, Array<Started<M>>] = [[], []];
  /** When the connection last carried a call (caller's clock, ms). */
  lastSeenMs = 0;
  /** Kernel time of its first call: a close older than this was of an earlier connection at the same address. */
  firstNs = 0n;
  /** Whether the tracker's #awaiting holds the connection (a response started and not ended). */
  awaiting = false;
  readonly parsers: [HttpStreamParser<bigint>, HttpStreamParser<bigint>];
  /** Set once the connection is known to speak HTTP/2: the HTTP/1 parsers are then unused. */
  h2: H2Connection<M> | undefined;

  constructor(key: string) {
    this.key = key;
    /* The response side of an exchange is the direction opposite to its request. */
    const bodyless = (responseIo: Io) => () => {
      const pending = this.pending;
      for (let i = 0; i < pending.length; i++) if (pending[i]!.io !== responseIo) return pending[i]!.request.method === "HEAD";
      return false;
    };
    this.parsers = [new HttpStreamParser<bigint>(bodyless(IO_READ)), new HttpStreamParser<bigint>(bodyless(IO_WRITE))];
  }
}

export interface ExchangeCounters {
  /** Requests forgotten because a connection had too many unanswered ones or was evicted/closed. */
  unanswered: number;
  /** Responses with no request to answer. */
  orphanResponses: number;
  /** Calls ignored as not HTTP/1.x or out of sync. */
  ignoredCalls: number;
  /** Heads that started like HTTP/1.x messages and did not parse: their exchanges are lost. */
  unparsed: number;
}

/** What push returns when a call completed nothing (most calls): shared, read-only. */
const NO_EXCHANGES: ReadonlyArray<HttpExchange<never>> = Object.freeze([]);

/** Whether any of the started messages is a response answering a request. */
function awaitsExchange<M>(started: ReadonlyArray<Started<M>>): boolean {
  for (let i = 0; i < started.length; i++) if (started[i] !== undefined) return true;
  return false;
}

export class ExchangeTracker<M = unknown> {
  /** Connections by key. */
  readonly #connections = new Map<string, ConnectionState<M>>();
  /**
   * The same connections from the least to the most recently used, linked through older/newer (a call moves its
   * connection to the end with a few assignments, where reinserting it in the map would cost two hash operations).
   */
  #oldest: ConnectionState<M> | undefined;
  #newest: ConnectionState<M> | undefined;
  readonly counters: ExchangeCounters = { unanswered: 0, orphanResponses: 0, ignoredCalls: 0, unparsed: 0 };
  /** HTTP/2: directions whose HPACK state was lost, streams never answered. */
  readonly h2Counters: H2Counters = { lostDirections: 0, stoppedDirections: 0, unanswered: 0 };
  readonly #h2Streams = new H2StreamPool();
  /** Connections with a response started and not ended. */
  readonly #awaiting = new Set<string>();
  /** What push returns when a call completed exchanges of HTTP/1.x, emptied and refilled by the next push. */
  readonly #done: Array<HttpExchange<M>> = [];
  /** Called when a request a process wrote (the client side) starts an exchange: its endpoint, and an HTTP/2 stream's id. */
  onClientRequest: ((meta: M, stream: number | undefined) => void) | undefined;
  /** H2Connection's hook for the streams it opens. */
  readonly #streamOpened = (s: HttpExchange<M>): void => {
    if (s.role === "client") this.onClientRequest?.(s.meta, s.id);
  };

  /**
   * Hands back an exchange this tracker returned, once the caller keeps no reference to it (counted, not made a
   * span): an HTTP/2 stream's object is then reused for a later stream (H2StreamPool). Others are left alone.
   */
  release(x: HttpExchange<M>): void {
    this.#h2Streams.release(x);
  }

  /** An HTTP/2 connection decoded from its middle (H2Connection.midstream). */
  #midstreamH2(): H2Connection<M> {
    const h2 = new H2Connection<M>(this.h2Counters, this.#h2Streams, this.#streamOpened);
    h2.midstream();
    return h2;
  }

  #emptyDone(): Array<HttpExchange<M>> {
    this.#done.length = 0;
    return this.#done;
  }

  constructor(
    private readonly maxConnections = DEFAULT_MAX_CONNECTIONS,
    private readonly maxPendingPerConnection = DEFAULT_MAX_PENDING_PER_CONNECTION,
  ) {}

  /** Connections tracked now. */
  get size(): number {
    return this.#connections.size;
  }

  /**
   * Feeds one captured call (`nowMs`: the caller's clock, for `flushIdle`); returns the exchanges it completed,
   * with those of a connection evicted or replaced to make room: read-only, and possibly an array the next push
   * empties and refills (read it before). The call object itself is not kept (a caller may refill one object for
   * every call); its meta is.
   */
  push(call: CapturedCall<M>, nowMs = 0): ReadonlyArray<HttpExchange<M>> {
    if (call.h2Stopped) {
      const stopped = this.#connections.get(call.connection);
      /* A connection never seen was refused at its first HTTP/2 call: nothing of either direction arrives. An
       * HTTP/1.x one (a 101 whose forwarding was refused) counts its request as unanswered when it closes. */
      if (stopped === undefined) this.h2Counters.stoppedDirections += 2;
      else stopped.h2?.stop();
      return NO_EXCHANGES as ReadonlyArray<HttpExchange<M>>;
    }
    let done: Array<HttpExchange<M>> | undefined;
    const key = call.connection;
    let conn = this.#connections.get(key);
    const at = conn?.h2?.directions[call.io].expectedOffset;
    if (call.h2Resumed === true && conn?.h2 !== undefined && (conn.h2.stopped || conn.h2.lostDirection || (at !== undefined && at !== call.streamOffset))) {
      /* Forwarded again after a stop (said, or its record lost: the bytes in between missing), or the first call with
       * frames after one forwarded cut that lost a direction; not a later record of the call that resumed it, nor a
       * cut the decoding went past: decoded anew from here, the streams open before it counted as unanswered. */
      conn!.h2!.close();
      conn!.h2 = this.#midstreamH2();
    }
    const expected = conn?.h2 ? conn.h2.directions[call.io].expectedOffset : conn?.parsers[call.io].expectedOffset;
    if (conn && expected !== undefined && call.streamOffset < expected) {
      /* Offsets never go back on one connection: the socket address was reused by a new one. */
      done = this.close(key);
      conn = undefined;
    }
    if (conn) {
      if (conn !== this.#newest) {
        this.#unlink(conn);
        this.#append(conn);
      }
    } else {
      conn = new ConnectionState<M>(key);
      conn.firstNs = call.timestampNs;
      if (this.#connections.size >= this.maxConnections) {
        const evicted = this.close(this.#oldest!.key);
        if (evicted.length > 0) (done ??= []).push(...evicted);
      }
      this.#connections.set(key, conn);
      this.#append(conn);
    }
    conn.lastSeenMs = nowMs;
    if (!conn.h2 && call.streamOffset === 0 && isH2Opening(call.data) && conn.parsers[call.io].expectedOffset === undefined) conn.h2 = new H2Connection<M>(this.h2Counters, this.#h2Streams, this.#streamOpened);
    else if (!conn.h2 && (call.h2Midstream || call.h2Resumed) && conn.parsers[0].expectedOffset === undefined && conn.parsers[1].expectedOffset === undefined) conn.h2 = this.#midstreamH2();
    if (conn.h2) {
      done = conn.h2.push(call.io, call.streamOffset, call.length, call.data, call.timestampNs, call.meta, done);
      return done ?? (NO_EXCHANGES as ReadonlyArray<HttpExchange<M>>);
    }
    const parser = conn.parsers[call.io];
    const ignoredBefore = parser.ignoredCalls;
    const unparsedBefore = parser.unparsedHeads;
    const messages = parser.push(call.streamOffset, call.length, call.data, call.timestampNs);
    this.counters.ignoredCalls += parser.ignoredCalls - ignoredBefore;
    this.counters.unparsed += parser.unparsedHeads - unparsedBefore;
    const started = conn.started[call.io];
    const pending = conn.pending;
    let upgrade: { req: Pending<M>; headEnd: number } | undefined;
    for (let i = 0; i < messages.length; i++) {
      const m = messages[i]!;
      if (m.head.kind === "request") {
        started.push(undefined);
        if (pending.length >= this.maxPendingPerConnection) {
          pending.shift();
          this.counters.unanswered++;
        }
        pending.push({ request: m.head, io: call.io, atNs: m.at, meta: call.meta });
        if (call.io === IO_WRITE) this.onClientRequest?.(call.meta, undefined);
        continue;
      }
      if (m.head.status >= 100 && m.head.status < 200 && m.head.status !== 101) {
        started.push(undefined);
        continue;
      }
      let idx = 0;
      while (idx < pending.length && pending[idx]!.io === call.io) idx++;
      if (idx === pending.length) {
        this.counters.orphanResponses++;
        started.push(undefined);
        continue;
      }
      const req = idx === 0 ? pending.shift()! : pending.splice(idx, 1)[0]!;
      if (m.head.status === 101 && m.headEnd !== undefined && asksForH2c(req.request)) {
        /* h2c: the 101 is no exchange of its own; the request is answered on stream 1 (below). */
        started.push(undefined);
        upgrade = { req, headEnd: m.headEnd };
        break;
      }
      const role = req.io === IO_READ ? "server" : "client";
      /* endNs is set when the response ends. */
      started.push({ role, request: req.request, response: m.head, startNs: req.atNs, endNs: 0n, meta: role === "server" ? call.meta : req.meta });
    }
    const ends = parser.ends;
    for (let i = 0; i < ends.length; i++) {
      const x = started.shift();
      if (x !== undefined) (done ??= this.#emptyDone()).push(ended(x, ends[i]!));
    }
    if (upgrade) done = this.#upgrade(conn, call, upgrade.req, upgrade.headEnd, done);
    const awaiting = awaitsExchange(started) || awaitsExchange(conn.started[1 - call.io]!);
    if (awaiting !== conn.awaiting) {
      conn.awaiting = awaiting;
      if (awaiting) this.#awaiting.add(key);
      else this.#awaiting.delete(key);
    }
    return done ?? (NO_EXCHANGES as ReadonlyArray<HttpExchange<M>>);
  }

  /**
   * The connection switched to HTTP/2 after `req` asked to (Upgrade: h2c) and a 101 answered it in `call`, its head
   * ending at stream offset `headEnd`: the rest of the connection goes to an H2Connection, where `req` is stream 1,
   * starting with the bytes of `call` after the head. Requests still waiting (none, per RFC 9113) are unanswered.
   */
  #upgrade(conn: ConnectionState<M>, call: CapturedCall<M>, req: Pending<M>, headEnd: number, done: Array<HttpExchange<M>> | undefined): Array<HttpExchange<M>> | undefined {
    this.counters.unanswered += conn.pending.length;
    conn.pending.length = 0;
    conn.started[0].length = 0;
    conn.started[1].length = 0;
    const h2 = new H2Connection<M>(this.h2Counters, this.#h2Streams, this.#streamOpened);
    conn.h2 = h2;
    const starts: [number, number] = [0, 0];
    starts[call.io] = headEnd;
    starts[1 - call.io] = conn.parsers[1 - call.io]!.expectedOffset ?? 0;
    h2.upgraded(req.request, req.io, req.atNs, req.meta, starts);
    const skip = headEnd - call.streamOffset;
    if (skip < call.length) done = h2.push(call.io, headEnd, call.length - skip, call.data.subarray(Math.min(skip, call.data.length)), call.timestampNs, call.meta, done);
    return done;
  }

  /**
   * Ends the responses still open on connections quiet since before `beforeMs` (caller's clock) at their last call
   * seen (streams whose end the parser could not find, e.g. a head longer than the captured bytes).
   */
  flushIdle(beforeMs: number): Array<HttpExchange<M>> {
    const done: Array<HttpExchange<M>> = [];
    for (const key of [...this.#awaiting]) {
      const conn = this.#connections.get(key);
      if (conn && conn.lastSeenMs >= beforeMs) continue;
      this.#awaiting.delete(key);
      if (conn) {
        conn.awaiting = false;
        done.push(...finishOpen(conn));
      }
    }
    return done;
  }

  /**
   * Forgets a connection (closed): a response still open ends at its last call seen and is returned; unanswered
   * requests are counted. Idempotent. `closedNs`: the close's kernel time; a connection whose first call came after
   * it is a later one at the same address (socket addresses are reused at once) and stays.
   */
  close(connection: string, closedNs?: bigint): Array<HttpExchange<M>> {
    const conn = this.#connections.get(connection);
    if (!conn) return [];
    if (closedNs !== undefined && conn.firstNs > closedNs) return [];
    this.#awaiting.delete(connection);
    const done = finishOpen(conn);
    this.counters.unanswered += conn.pending.length;
    conn.h2?.close();
    this.#connections.delete(connection);
    this.#unlink(conn);
    return done;
  }

  /**
   * Forgets every connection whose key starts with `prefix` (e.g. all of a process), least recently used first;
   * `closedNs` as for close (a process's exit, and a later process given the same pid).
   */
  closeMatching(prefix: string, closedNs?: bigint): Array<HttpExchange<M>> {
    const keys: string[] = [];
    for (let c = this.#oldest; c !== undefined; c = c.newer) if (c.key.startsWith(prefix)) keys.push(c.key);
    const done: Array<HttpExchange<M>> = [];
    for (const key of keys) done.push(...this.close(key, closedNs));
    return done;
  }

  /** Makes `conn` the most recently used (it is in no list). */
  #append(conn: ConnectionState<M>): void {
    conn.older = this.#newest;
    conn.newer = undefined;
    if (this.#newest) this.#newest.newer = conn;
    else this.#oldest = conn;
    this.#newest = conn;
  }

  /** Takes `conn` out of the recency list. */
  #unlink(conn: ConnectionState<M>): void {
    if (conn.older) conn.older.newer = conn.newer;
    else this.#oldest = conn.newer;
    if (conn.newer) conn.newer.older = conn.older;
    else this.#newest = conn.older;
    conn.older = undefined;
    conn.newer = undefined;
  }
}

/** The exchange of a response that ended at `endNs` (each ends once: it is completed in place). */
/** Whether a request asks to switch to HTTP/2 over cleartext (an `Upgrade` header listing h2c). */
function asksForH2c(request: HttpRequestHead): boolean {
  const u = request.upgrade;
  return u !== undefined && u.split(",").some((p) => p.trim().toLowerCase() === "h2c");
}

function ended<M>(x: HttpExchange<M>, endNs: bigint): HttpExchange<M> {
  x.endNs = endNs;
  return x;
}

/** Ends the open response of each direction at its parser's last call; the direction's other open messages are dropped. */
function finishOpen<M>(conn: ConnectionState<M>): Array<HttpExchange<M>> {
  const done: Array<HttpExchange<M>> = [];
  for (const io of [IO_READ, IO_WRITE] as const) {
    const started = conn.started[io];
    const endNs = conn.parsers[io].finish();
    const first = started.shift();
    if (first !== undefined && endNs !== undefined) done.push(ended(first, endNs));
    started.length = 0;
  }
  return done;
}
