/**
 * Traces across a connection whose two ends are both traced on this host (a client and a server on loopback, a
 * sidecar, containers talking by their addresses): the server's span becomes the child of the client's, in its
 * trace, whether or not the request carried a traceparent. Nothing is written into the traffic: the two exchanges
 * are matched by the connection's addresses as each end sees them (client local = server remote, and the other way
 * round; no NAT in between; loopback addresses with the process's network namespace, since every namespace has
 * its own: none, and no link, for a process gone before its request was read), the HTTP/2 stream id, the order of
 * the connection's exchanges (the oldest server span waiting), and their times on the one host clock: the server's
 * exchange lies within the client's (the client wrote the request before the server read it and read the
 * response's end after the server wrote it) give or take LINK_SLACK_NS, since on loopback the reader's call may
 * return before the writer's does.
 *
 * A server's span mostly ends before its client's, so it is held (up to `waitMs`, at most `maxHeld` spans) until the
 * client's span is made; then it is linked and released, or released as it is at the wait's end when none comes
 * (the client's exchange ended otherwise, or its span was over the budget). A client's span made first (its read
 * returned before the server's write did) is remembered as long for the server's. A server's span is held only when
 * a request the client side wrote on that connection (or HTTP/2 stream) was captured in the last `waitMs`
 * (`clientRequest`): spans of servers whose clients are not traced here go on at once. Only peers that may be on
 * this host count (a loopback, private or own address).
 */
import { readlinkSync } from "node:fs";
import type { SpanItem } from "../../../export/model";
import type { EndpointMeta } from "./spans";
import type { HttpExchange } from "./parser";
import { addressClass } from "./red";
import { SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE, SPAN_FLAGS_CONTEXT_IS_REMOTE, SPAN_FLAGS_TRACE_FLAGS_MASK } from "./trace-context";

/** How long a server's span waits for its client's at most (its release checked once a second: up to twice that). */
export const LINK_WAIT_MS = 1000;
/** Server spans held at most; past it the oldest is released unlinked. */
export const MAX_HELD_SPANS = 4096;
/** How far the two ends' times may cross (a loopback reader returning before its writer). */
export const LINK_SLACK_NS = 1_000_000n;

interface Held {
  x: HttpExchange<EndpointMeta>;
  span: SpanItem;
  key: string;
  atMs: number;
}

/** A client's span made before its server's exchange ended (on loopback a reader may return before its writer). */
interface Recent {
  startNs: bigint;
  endNs: bigint;
  span: SpanItem;
  atMs: number;
}

/** Client spans remembered at most for servers that end after them. */
const MAX_RECENT = 4096;

export interface LinkCounters {
  /** Server spans made children of a client span of this host. */
  linked: number;
}

/** Whether server exchange `x` lies within a client's [startNs, endNs], give or take LINK_SLACK_NS. */
const nests = (x: HttpExchange<EndpointMeta>, startNs: bigint, endNs: bigint): boolean => x.startNs + LINK_SLACK_NS >= startNs && x.endNs <= endNs + LINK_SLACK_NS;

/** Client requests awaited at most (their keys forgotten all at once past it). */
const MAX_AWAITED = 16384;

export class LocalLinks {
  /** Client requests captured, by connection key: when the last one was (the caller's clock, ms). */
  readonly #awaited = new Map<string, number>();
  /** Held server spans by connection key, oldest first. */
  readonly #held = new Map<string, Held[]>();
  /** Client spans whose server's span had not ended yet, by connection key, oldest first. */
  readonly #recent = new Map<string, Recent[]>();
  #recentSize = 0;
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
    /** A process's network namespace (for loopback addresses, each namespace's own), or undefined when unknown. */
    private readonly netnsOf: (pid: number) => string | undefined,
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
    let ends = server ? `${m.remoteAddress}:${m.remotePort}>${m.localAddress}:${m.localPort}` : `${m.localAddress}:${m.localPort}>${m.remoteAddress}:${m.remotePort}`;
    if (addressClass(m.remoteAddress) === "loopback") {
      const ns = this.netnsOf(m.pid);
      if (ns === undefined) return undefined;
      ends = `${ns}/${ends}`;
    }
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
    /* Its client's span may already have been made (the client's read returned first). */
    const recent = this.#recent.get(key);
    if (recent !== undefined) {
      const i = recent.findIndex((c) => nests(x, c.startNs, c.endNs));
      if (i >= 0) {
        const c = recent[i]!;
        recent.splice(i, 1);
        if (recent.length === 0) this.#recent.delete(key);
        this.#recentSize--;
        if (x.id !== undefined) this.#awaited.delete(key);
        this.#link(span, c.span);
        return false;
      }
    }
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
  linkClient(x: HttpExchange<EndpointMeta>, span: SpanItem, nowMs: number): void {
    if (this.#awaited.size === 0) return;
    const key = this.#key(x.meta, false, x.id);
    if (key === undefined || !this.#awaited.has(key)) return;
    const list = this.#held.get(key);
    const i = list === undefined ? -1 : list.findIndex((h) => nests(h.x, x.startNs, x.endNs));
    if (i < 0) {
      /* Its server's exchange has not ended yet: remembered for it (holdServer). */
      if (this.#recentSize >= MAX_RECENT) this.#dropRecent(Infinity);
      const c: Recent = { startNs: x.startNs, endNs: x.endNs, span, atMs: nowMs };
      const recent = this.#recent.get(key);
      if (recent) recent.push(c);
      else this.#recent.set(key, [c]);
      this.#recentSize++;
      return;
    }
    /* An HTTP/2 stream's key is not used again. */
    if (x.id !== undefined) this.#awaited.delete(key);
    const h = list![i]!;
    this.#forget(h, list!, i);
    this.#link(h.span, span);
    this.release(h.x, h.span);
  }

  /** `server` becomes the child of `client`, in its trace, the parent remote, with its trace flags. */
  #link(server: SpanItem, client: SpanItem): void {
    server.traceId = client.traceId;
    server.parentSpanId = client.spanId;
    server.flags = ((client.flags ?? 0) & SPAN_FLAGS_TRACE_FLAGS_MASK) | SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE | SPAN_FLAGS_CONTEXT_IS_REMOTE;
    this.counters.linked++;
  }

  /** Forgets the client spans remembered before `beforeMs` (all with Infinity). */
  #dropRecent(beforeMs: number): void {
    for (const [key, list] of this.#recent) {
      let n = 0;
      while (n < list.length && list[n]!.atMs < beforeMs) n++;
      if (n === 0) continue;
      this.#recentSize -= n;
      if (n === list.length) this.#recent.delete(key);
      else list.splice(0, n);
    }
  }

  /**
   * Releases, unlinked, the spans held `waitMs` or longer (every one with `all`: a flush, a shutdown), and forgets the
   * client spans remembered as long.
   */
  releaseDue(nowMs: number, all = false): void {
    if (this.#recentSize > 0) this.#dropRecent(all ? Infinity : nowMs - this.waitMs);
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

/** Processes' network namespaces kept at most (forgotten all at once past it). */
const MAX_NETNS_PIDS = 4096;

/**
 * Network namespaces of processes by pid: the target of /proc/<pid>/ns/net ("net:[4026531840]"), read once per pid
 * (kept while the pid is; a pid the link cannot be read for, the process gone, has none and is read again next time).
 */
export class NetnsCache {
  readonly #byPid = new Map<number, string>();

  constructor(private readonly read: (pid: number) => string = (pid) => readlinkSync(`/proc/${pid}/ns/net`)) {}

  of(pid: number): string | undefined {
    const known = this.#byPid.get(pid);
    if (known !== undefined) return known;
    let ns: string;
    try {
      ns = this.read(pid);
    } catch {
      return undefined;
    }
    if (this.#byPid.size >= MAX_NETNS_PIDS) this.#byPid.clear();
    this.#byPid.set(pid, ns);
    return ns;
  }
}
