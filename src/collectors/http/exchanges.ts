/**
 * Pairs HTTP requests with their responses per connection. Each connection has one parser per direction;
 * a request read by a process makes it the server of that exchange, a request written makes it the client.
 * Responses answer the oldest unanswered request (HTTP/1.x answers in order, also when pipelined).
 * Bounded: at most `maxConnections` connections (least recently used evicted) and `maxPendingPerConnection`
 * unanswered requests each. Pure apart from the clock-free timestamps the caller passes.
 */
import { HttpStreamParser, type HttpRequestHead, type HttpResponseHead } from "./parser";

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
}

/** A request and its response, ready to become a span. */
export interface HttpExchange<M = unknown> {
  role: "server" | "client";
  request: HttpRequestHead;
  response: HttpResponseHead;
  /** Server: when the request arrived; client: when the request was written. Kernel monotonic ns. */
  startNs: bigint;
  /** Server: when the response was written; client: when it arrived. */
  endNs: bigint;
  meta: M;
}

interface Pending<M> {
  request: HttpRequestHead;
  io: Io;
  atNs: bigint;
  meta: M;
}

class ConnectionState<M> {
  readonly pending: Array<Pending<M>> = [];
  readonly parsers: [HttpStreamParser<bigint>, HttpStreamParser<bigint>];

  constructor() {
    /* The response side of an exchange is the direction opposite to its request. */
    const bodyless = (responseIo: Io) => () => this.pending.find((p) => p.io !== responseIo)?.request.method === "HEAD";
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
}

export class ExchangeTracker<M = unknown> {
  readonly #connections = new Map<string, ConnectionState<M>>();
  readonly counters: ExchangeCounters = { unanswered: 0, orphanResponses: 0, ignoredCalls: 0 };

  constructor(
    private readonly maxConnections = DEFAULT_MAX_CONNECTIONS,
    private readonly maxPendingPerConnection = DEFAULT_MAX_PENDING_PER_CONNECTION,
  ) {}

  /** Connections tracked now. */
  get size(): number {
    return this.#connections.size;
  }

  /** Feeds one captured call; returns the exchanges it completed. */
  push(call: CapturedCall<M>): Array<HttpExchange<M>> {
    let conn = this.#connections.get(call.connection);
    const expected = conn?.parsers[call.io].expectedOffset;
    if (conn && expected !== undefined && call.streamOffset < expected) {
      /* Offsets never go back on one connection: the socket address was reused by a new one. */
      this.close(call.connection);
      conn = undefined;
    }
    if (conn) {
      this.#connections.delete(call.connection);
    } else {
      conn = new ConnectionState<M>();
      if (this.#connections.size >= this.maxConnections) {
        const oldest = this.#connections.keys().next().value as string;
        this.close(oldest);
      }
    }
    this.#connections.set(call.connection, conn);
    const parser = conn.parsers[call.io];
    const ignoredBefore = parser.ignoredCalls;
    const messages = parser.push(call.streamOffset, call.length, call.data, call.timestampNs);
    this.counters.ignoredCalls += parser.ignoredCalls - ignoredBefore;
    const done: Array<HttpExchange<M>> = [];
    for (const m of messages) {
      if (m.head.kind === "request") {
        if (conn.pending.length >= this.maxPendingPerConnection) {
          conn.pending.shift();
          this.counters.unanswered++;
        }
        conn.pending.push({ request: m.head, io: call.io, atNs: m.at, meta: call.meta });
        continue;
      }
      if (m.head.status >= 100 && m.head.status < 200 && m.head.status !== 101) continue;
      const idx = conn.pending.findIndex((p) => p.io !== call.io);
      if (idx < 0) {
        this.counters.orphanResponses++;
        continue;
      }
      const [req] = conn.pending.splice(idx, 1);
      const role = req!.io === IO_READ ? "server" : "client";
      done.push({ role, request: req!.request, response: m.head, startNs: req!.atNs, endNs: m.at, meta: role === "server" ? call.meta : req!.meta });
    }
    return done;
  }

  /** Forgets a connection (closed); its unanswered requests are counted. Idempotent. */
  close(connection: string): void {
    const conn = this.#connections.get(connection);
    if (!conn) return;
    this.counters.unanswered += conn.pending.length;
    this.#connections.delete(connection);
  }

  /** Forgets every connection whose key starts with `prefix` (e.g. all of a process). */
  closeMatching(prefix: string): void {
    for (const key of [...this.#connections.keys()]) if (key.startsWith(prefix)) this.close(key);
  }
}
