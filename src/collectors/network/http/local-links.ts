/**
 * Traces across a connection whose two ends are both traced on this host (a client and a server on loopback, a
 * sidecar, containers talking by their addresses): the server's span becomes the child of the client's, in its
 * trace, whether or not the request carried a traceparent. Nothing is written into the traffic: the two exchanges
 * are matched by the connection's addresses as each end sees them (client local = server remote, and the other way
 * round; no NAT in between), the HTTP/2 stream id, and their times on the one host clock (the server's exchange
 * lies within the client's: the client wrote the request before the server read it, and read the response's end
 * after the server wrote it).
 *
 * A server's span ends before its client's, so it is held (up to `waitMs`, at most `maxHeld` spans) until the
 * client's span is made; then it is linked and released, or released as it is at the wait's end when none comes
 * (the client's exchange ended otherwise, or its span was over the budget). A server's span is held only when a request the client side wrote on
 * that connection (or HTTP/2 stream) was captured in the last `waitMs` (`clientRequest`): spans of servers whose
 * clients are not traced here go on at once. Only peers that may be on this host count (a loopback, private or own
 * address).
 */
import type { SpanItem } from "../../../export/model";
import type { EndpointMeta } from "./spans";
import type { HttpExchange } from "./parser";
import { SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE, SPAN_FLAGS_CONTEXT_IS_REMOTE, SPAN_FLAGS_TRACE_FLAGS_MASK } from "./trace-context";

/** How long a server's span waits for its client's at most (its release checked once a second: up to twice that). */
export const LINK_WAIT_MS = 1000;
/** Server spans held at most; past it the oldest is released unlinked. */
export const MAX_HELD_SPANS = 4096;

interface Held {
  x: HttpExchange<EndpointMeta>;
  span: SpanItem;
  key: string;
  atMs: number;
}

export interface LinkCounters {
  /** Server spans made children of a client span of this host. */
  linked: number;
}

/** Client requests awaited at most (their keys forgotten all at once past it). */
const MAX_AWAITED = 16384;

export class LocalLinks {
  /** Client requests captured, by connection key: when the last one was (the caller's clock, ms). */
  readonly #awaited = new Map<string, number>();
  /** Held server spans by connection key, oldest first. */
  readonly #held = new Map<string, Held[]>();
  /** The same, in the order they were held (for the time and size bounds). */
  #order: Held[] = [];
  #orderStart = 0;
  #size = 0;
  readonly counters: LinkCounters = { linked: 0 };

  constructor(
    /** Where a span goes once linked or released (with its exchange, for its exemplar). */
    private readonly release: (x: HttpExchange<EndpointMeta>, span: SpanItem) => void,
    /** Whether a peer address may be a process of this host. */
    private readonly mayBeLocal: (address: string) => boolean,
    private readonly waitMs = LINK_WAIT_MS,
    private readonly maxHeld = MAX_HELD_SPANS,
  ) {}

  /** Spans held now. */
  get size(): number {
    return this.#size;
  }

  /**
   * The key of an exchange's connection, as both of its ends see it: client address and port, then server's, and an
   * HTTP/2 stream's id; undefined when the peer cannot be on this host.
   */
  #key(m: EndpointMeta, server: boolean, id: number | undefined): string | undefined {
    if (!this.mayBeLocal(m.remoteAddress)) return undefined;
    const ends = server ? `${m.remoteAddress}:${m.remotePort}>${m.localAddress}:${m.localPort}` : `${m.localAddress}:${m.localPort}>${m.remoteAddress}:${m.remotePort}`;
    return id === undefined ? ends : `${ends}#${id}`;
  }

  /**
   * A request written by a client (`meta` its end; HTTP/2: on stream `id`) was captured at `nowMs`: a server span of
   * that connection (stream) in the next `waitMs` waits for the client's.
   */
  clientRequest(meta: EndpointMeta, id: number | undefined, nowMs: number): void {
    const key = this.#key(meta, false, id);
    if (key === undefined) return;
    if (this.#awaited.size >= MAX_AWAITED) this.#awaited.clear();
    this.#awaited.set(key, nowMs);
  }

  /** Holds a server's span for its client's (true), or says it need not wait (false: the caller releases it). */
  holdServer(x: HttpExchange<EndpointMeta>, span: SpanItem, nowMs: number): boolean {
    if (this.#awaited.size === 0) return false;
    const key = this.#key(x.meta, true, x.id);
    if (key === undefined) return false;
    const at = this.#awaited.get(key);
    if (at === undefined || nowMs - at > this.waitMs) return false;
    if (this.#size >= this.maxHeld) this.#releaseOldest();
    const h: Held = { x, span, key, atMs: nowMs };
    const list = this.#held.get(key);
    if (list) list.push(h);
    else this.#held.set(key, [h]);
    this.#order.push(h);
    this.#size++;
    return true;
  }

  /**
   * A client's span about to be released (`x` its exchange): the held server span of the same exchange (if any)
   * becomes its child in its trace, the parent remote (another process), with the client span's trace flags, and is
   * released. (A client exchange whose span is not made, over the budget, is not looked up: the server's span goes
   * at the wait's end.)
   */
  linkClient(x: HttpExchange<EndpointMeta>, span: SpanItem): void {
    if (this.#size === 0) return;
    const key = this.#key(x.meta, false, x.id);
    if (key === undefined) return;
    const list = this.#held.get(key);
    if (!list) return;
    /* An HTTP/2 stream's key is not used again. */
    if (x.id !== undefined) this.#awaited.delete(key);
    const i = list.findIndex((h) => h.x.startNs >= x.startNs && h.x.endNs <= x.endNs);
    if (i < 0) return;
    const h = list[i]!;
    this.#forget(h, list, i);
    h.span.traceId = span.traceId;
    h.span.parentSpanId = span.spanId;
    h.span.flags = ((span.flags ?? 0) & SPAN_FLAGS_TRACE_FLAGS_MASK) | SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE | SPAN_FLAGS_CONTEXT_IS_REMOTE;
    this.counters.linked++;
    this.release(h.x, h.span);
  }

  /** Releases, unlinked, the spans held `waitMs` or longer (every one with `all`: a flush, a shutdown). */
  releaseDue(nowMs: number, all = false): void {
    while (this.#orderStart < this.#order.length) {
      const h = this.#order[this.#orderStart]!;
      if (h.atMs < 0) {
        this.#orderStart++;
        continue;
      }
      if (!all && nowMs - h.atMs < this.waitMs) break;
      this.#releaseOldest();
    }
    this.#compact();
  }

  #releaseOldest(): void {
    while (this.#orderStart < this.#order.length) {
      const h = this.#order[this.#orderStart++]!;
      if (h.atMs < 0) continue;
      const list = this.#held.get(h.key)!;
      this.#forget(h, list, list.indexOf(h));
      this.release(h.x, h.span);
      return;
    }
  }

  /** Takes `h` (at `i` of its key's list) out of the held spans; its place in the order is skipped later. */
  #forget(h: Held, list: Held[], i: number): void {
    list.splice(i, 1);
    if (list.length === 0) this.#held.delete(h.key);
    h.atMs = -1;
    this.#size--;
  }

  /** Drops the order's released prefix once it is most of the array. */
  #compact(): void {
    if (this.#orderStart > 1024 && this.#orderStart * 2 > this.#order.length) {
      this.#order = this.#order.slice(this.#orderStart);
      this.#orderStart = 0;
    } else if (this.#size === 0) {
      this.#order.length = 0;
      this.#orderStart = 0;
    }
  }
}
