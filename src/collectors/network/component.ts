/**
 * Component `ebpf/network` (readiness `ebpf`): runs the `network` program set through the eBPF core and
 * turns its records into telemetry: connection metrics every `metrics_interval`, CONNECT spans, and HTTP
 * spans (when `agent.ebpf.network.http`). Spans beyond `max_spans_per_second` are dropped and counted in
 * `<ns>_spans_dropped_total{reason="rate_limit"}`, whether the kernel skipped the exchange or user space did;
 * HTTP messages that started like HTTP/1.x but whose heads did not parse are counted as `http_unparsed`, requests
 * never answered (connection closed or too many waiting) as `http_unanswered` (HTTP/2 streams too), HTTP/2 connection
 * directions whose HPACK state was lost (bytes not forwarded) as `http2_state_lost`.
 * RED metrics (`http_metrics`): every HTTP/1.x exchange is counted in the kernel whether or not it is captured as a
 * span; every second and each metrics interval (and flush) take the kernel's counts, template routes and export the
 * histograms and service graph of src/collectors/network/http/red.ts, with exemplars from the spans sampled meanwhile.
 * Where the kernel cannot count (http_capture syscalls, no kernel BTF: spec.ts userRedCounted) the kernel captures
 * every exchange and user space counts each one it decodes, before the span cap applies.
 * A reload that changes what the kernel side was built with reloads the set.
 */
import type { AgentContext } from "../context";
import type { Config } from "../../config/schema";
import { msOf } from "../../config/units";
import type { EbpfCore } from "../../ebpf/core";
import { EbpfSetComponent, reloadSet } from "../../ebpf/component";
import type { LoadedSet } from "../../ebpf/loader";
import type { SpanItem } from "../../export/model";
import type { Component, ComponentHost } from "../../lifecycle/component";
import { SPAN_HTTP2_STATE_LOST_REASON, SPAN_HTTP_UNANSWERED_REASON, SPAN_HTTP_UNPARSED_REASON, SPAN_RATE_LIMIT_REASON } from "../../telemetry/metrics";
import { ExchangeTracker, type CapturedCall } from "./http/exchanges";
import { STATUS_RESET, exchangeDurationNs, type HttpExchange } from "./http/parser";
import { RpcMetrics } from "./http/rpc-metrics";
import { exchangeToSpan, type EndpointMeta, type SpanContext } from "./http/spans";
import { RedAggregator, addressClass, localAddresses, redOptionsOf } from "./http/red";
import { LocalLinks, NetnsCache } from "./http/local-links";
import { RedMaps, Role, redMethod, type RedKey } from "./red-maps";
import { PerSecondBudget } from "./budget";
import { KernelClock } from "./clock";
import { ConnectionTelemetry } from "./connections";
import { ConnKind, HttpEventFlag, releaseData, type ConnEvent, type HttpEndpoint, type HttpEvent, type NetworkEvent } from "./decoders";
import { ProcessLabeler } from "./labels";
import { ownKernelPid } from "../../ebpf/self";
import type { TlsEvent } from "../tls/decoder";
import { NetworkStat, configRedCounted, kernelExchangesPerSecond, networkLimits, networkSetSpec, userRedCounted } from "./spec";
import { networkOf, type NetworkConfig } from "./config";
import { DropWarnings, KernelStats } from "./kernel-stats";
import { DeferredCloses } from "./deferred-closes";

const STATS_POLL_MS = 1000;
const SCOPE = { name: "svc-agent/ebpf/network" };
const MAX_HTTP_CONNECTIONS = 16_384;
export const CLOSE_GRACE_MS = 2000;
/** A response whose end the parser cannot find ends at its last call once its connection is quiet this long. */
const HTTP_IDLE_END_MS = 5000;


/** What the reused call holds between records (nothing of the last one). */
const NO_BYTES = new Uint8Array(0);
/** A socket's connection as #onHttp keeps it: the tracker's key, and the endpoint its records last described. */
interface HttpConnection {
  readonly pid: number;
  /** The socket address's high word (the map is keyed by the low 53 bits). */
  readonly high: number;
  readonly key: string;
  endpoint: HttpEndpoint | undefined;
}

const NO_ENDPOINT: EndpointMeta = Object.freeze({ pid: 0, comm: "", localAddress: "", localPort: 0, remoteAddress: "", remotePort: 0 });

/**
 * What the kernel side is built with: a change needs a new set (which misses what runs while it loads). The
 * limits (max_spans_per_second, http2_records_per_second) are set in the running set instead (setVariables); the
 * http_events ring keeps the size it was created with.
 */
function kernelKey(c: NetworkConfig): string {
  return JSON.stringify([c.http, c.tls, c.http_capture, c.max_connections, c.http_metrics, c.http_duration_buckets, c.http_body_sizes, c.http_body_size_buckets]);
}


export class NetworkCollector implements Component {
  readonly id = "ebpf/network";
  readonly readiness = "ebpf" as const;
  readonly #ctx: AgentContext;
  readonly #core: EbpfCore;
  readonly #selfPid: number;
  #inner: EbpfSetComponent<NetworkEvent>;
  #set: LoadedSet<NetworkEvent> | undefined;
  #cfg: NetworkConfig;
  #host: ComponentHost | undefined;
  readonly #clock = new KernelClock();
  readonly #labeler: ProcessLabeler;
  #connections: ConnectionTelemetry;
  #spanContext: SpanContext;
  /** rpc.server.duration / rpc.client.duration of gRPC calls (every completed call, whatever the span budget). */
  readonly #rpc: RpcMetrics;
  readonly #http = new ExchangeTracker<EndpointMeta>(MAX_HTTP_CONNECTIONS);
  /** The call #onHttp hands the tracker, refilled for each record. */
  readonly #call: CapturedCall<EndpointMeta> = { connection: "", io: 0, timestampNs: 0n, streamOffset: 0, length: 0, data: NO_BYTES, h2Stopped: false, h2Midstream: false, h2Resumed: false, meta: NO_ENDPOINT };
  /** The tracker's connection keys and endpoints by socket address (bounded: emptied when it holds twice the connections tracked). */
  readonly #httpConnections = new Map<number, HttpConnection>();
  /** The endpoint of each TLS connection by its key (at most MAX_HTTP_CONNECTIONS, oldest forgotten first). */
  readonly #tlsEndpoints = new Map<string, EndpointMeta>();
  readonly #budget: PerSecondBudget;
  #pendingSpans: SpanItem[] = [];
  #flushScheduled = false;
  #metricsTimer: ReturnType<typeof setInterval> | undefined;
  #statsTimer: ReturnType<typeof setInterval> | undefined;
  /** What the kernel's stats say was dropped, or could not be accounted for, and the HTTP/2 connections found midway. */
  readonly #kernelStats = new KernelStats({
    sampledOut: NetworkStat.HTTP_SAMPLED_OUT,
    h2Lost: NetworkStat.H2_STOPPED_LOST,
    h2Midstream: NetworkStat.H2_MIDSTREAM,
    h2Resumed: NetworkStat.H2_RESUMED,
    uncounted: [
      { index: NetworkStat.CONNS_FULL, reason: "conns_full" },
      { index: NetworkStat.PENDING_FULL, reason: "pending_full" },
      { index: NetworkStat.RED_REPLACED, reason: "red_replaced" },
    ],
  });
  readonly #dropWarnings = new DropWarnings();
  #removeFlushSource: (() => void) | undefined;
  /**
   * Connections closed in the kernel, forgotten by the HTTP tracker CLOSE_GRACE_MS later and once their HTTP records
   * (http_events) were handled.
   */
  readonly #closing = new DeferredCloses((key, ns) => this.#offerExchanges(this.#http.close(key, ns)), CLOSE_GRACE_MS, MAX_HTTP_CONNECTIONS);
  /** Processes with TLS connections that exited (key prefix of their connections), closed as #closing after their plaintext records (tls_events). */
  readonly #tlsExits = new DeferredCloses((prefix, ns) => this.#closeTlsProcess(prefix, ns), CLOSE_GRACE_MS, MAX_HTTP_CONNECTIONS);
  /** Whether the TLS set's ring has nothing left to hand on (given by the TLS set with each exit). */
  #tlsCaughtUp: () => boolean = () => true;
  readonly #httpDropsSeen = { unparsed: 0, unanswered: 0, h2Lost: 0, h2Stopped: 0 };
  /** Spans produced, for tests and the log line at shutdown. */
  readonly counters = { connectSpans: 0, httpSpans: 0, dropped: 0, kernelSampledOut: 0 };
  /** The kernel's RED maps while the set is attached with http_metrics. */
  #redMaps: RedMaps | undefined;
  /** RED metrics counted in user space from every decoded exchange (spec.ts, userRedCounted). */
  #userRed = false;
  #red: RedAggregator;
  /** Server spans waiting for their client's span on this host, whose child they become (local-links.ts). */
  readonly #links: LocalLinks;
  /** Network namespaces of processes (loopback connections are matched within one). */
  readonly #netns = new NetnsCache();
  /** Spans dropped over the per-second budget not yet in the metric (#countRateDrops). */
  #rateDropsPending = 0;
  /** The key #redFromUser refills for each exchange. */
  readonly #redKey: Omit<RedKey, "pathHash"> = { pid: 0, role: Role.SERVER, method: "", status: 0, peer: "", peerPort: 0, scheme: undefined };
  /** The client address #serverPeer saw last and its answer. */
  #lastClientAddress = "";
  #lastServerPeer = "";
  /** Epoch ns where the current RED interval began. */
  #redStartNs: bigint;
  /** performance.now() of the current run of records (#turnNowMs); -1 between runs. */
  #turnMs = -1;

  constructor(ctx: AgentContext, core: EbpfCore, selfPid = ownKernelPid()) {
    this.#ctx = ctx;
    this.#core = core;
    this.#selfPid = selfPid;
    this.#cfg = networkOf(ctx.config);
    this.#labeler = new ProcessLabeler(core.processes, ctx.workloads);
    this.#budget = new PerSecondBudget(this.#cfg.max_spans_per_second);
    this.#connections = this.#newConnections(this.#cfg);
    this.#rpc = new RpcMetrics({ maxSeries: this.#cfg.max_series, describe: (pid, comm) => this.#labeler.describe(pid, comm), scope: SCOPE }, this.#clock.nowEpochNs());
    this.#spanContext = this.#newSpanContext(this.#cfg);
    this.#red = this.#newRed(this.#cfg);
    const local = localAddresses();
    this.#links = new LocalLinks(
      (x, span) => this.#release(x, span),
      (address) => addressClass(address) !== "public" || local.has(address),
      (pid) => this.#netns.of(pid),
    );
    /* Only while spans are being made: past the second's budget, the client's span most likely will not be (a link
     * is then missed at most; HTTP/2 streams go by in the tens of thousands a second). */
    this.#http.onClientRequest = (meta, stream) => {
      const nowMs = this.#turnNowMs();
      if (this.#budget.hasRoom(nowMs)) this.#links.clientRequest(meta, stream, nowMs);
    };
    this.#redStartNs = this.#clock.nowEpochNs();
    this.#inner = this.#newInner(this.#cfg);
  }

  #newRed(c: NetworkConfig): RedAggregator {
    const workloads = this.#ctx.workloads;
    return new RedAggregator(
      redOptionsOf(c, {
        describe: (pid) => this.#labeler.describe(pid, ""),
        path: (hash) => this.#redMaps?.path(hash),
        serviceAt: (address, port) => workloads?.serviceAt?.(address, port),
        scope: SCOPE,
      }),
    );
  }

  /** Takes what the kernel counted since the last take into the aggregator. */
  #takeRed(): void {
    if (!this.#redMaps) return;
    try {
      const { entries, overflow, bodies } = this.#redMaps.take();
      this.#red.add(entries, overflow);
      if (bodies.length > 0) this.#red.addBodies(bodies);
    } catch (e) {
      this.#host?.logger.warn("reading the RED maps failed", { error: (e as Error).message });
    }
  }

  #newConnections(c: NetworkConfig): ConnectionTelemetry {
    const workloads = this.#ctx.workloads;
    return new ConnectionTelemetry({
      maxSeries: c.max_series,
      labeler: this.#labeler,
      toEpochNs: (ns) => this.#clock.toEpochNs(ns),
      startEpochNs: this.#clock.nowEpochNs(),
      remoteService: (address, port) => workloads?.serviceAt?.(address, port),
      scope: SCOPE,
    });
  }

  #newInner(c: NetworkConfig): EbpfSetComponent<NetworkEvent> {
    return new EbpfSetComponent<NetworkEvent>(this.#core, {
      spec: networkSetSpec({ selfPid: this.#selfPid, http: c.http, httpCapture: c.http_capture, httpExchangesPerSecond: kernelExchangesPerSecond(c), h2RecordsPerSecond: c.http2_records_per_second, maxConnections: c.max_connections, redMetrics: c.http_metrics, redBodySizes: c.http_body_sizes, tls: c.tls }),
      onEvent: (e) => this.handle(e),
      onAttached: (set) => {
        this.#set = set;
        // Set here, not when the set is made: a replacement is made while the set it replaces drains its last events.
        this.#userRed = userRedCounted(c);
        this.#kernelStats.reset();
        this.#redMaps = undefined;
        if (configRedCounted(c)) {
          try {
            this.#redMaps = new RedMaps(set.object, c.http_duration_buckets, c.http_body_sizes ? c.http_body_size_buckets : undefined);
          } catch (e) {
            this.#host?.logger.warn("RED metrics unavailable", { error: (e as Error).message });
          }
        }
      },
      onDetached: () => {
        this.#pollStats();
        this.#takeRed();
        this.#redMaps = undefined;
        this.#set = undefined;
      },
      enabled: (config) => networkOf(config).enabled,
    });
  }

  /** Handles one decoded record (called by the set's pumps; public for tests with fake records). */
  handle(e: NetworkEvent): void {
    if (e.type === "conn") this.#onConn(e);
    else this.#onHttp(e);
  }

  #onConn(e: ConnEvent): void {
    const span = this.#connections.apply(e);
    if (span) {
      this.counters.connectSpans++;
      this.#offer(span);
    }
    /* The HTTP records of a connection come through another ring buffer and may be read after its CLOSED record: forget it later. */
    if (e.kind === ConnKind.CLOSED || e.kind === ConnKind.FAILED) {
      this.#closing.add(`${e.pid}:${e.sk}`, e.timestampNs, performance.now());
    }
  }

  /**
   * The connection of a socket in a process: the exchange tracker's key (`pid:sk`, made once per connection) and the
   * endpoint its records last described (kept while they say the same: its strings are made once per connection).
   */
  #connectionOf(e: HttpEvent): HttpConnection {
    const high = e.skHigh;
    /* The low 53 bits of the address: the map's key; the high word tells apart the rest. */
    const id = e.skLow + (high & 0x1f_ffff) * 2 ** 32;
    const known = this.#httpConnections.get(id);
    if (known !== undefined && known.pid === e.pid && known.high === high) return known;
    if (this.#httpConnections.size >= MAX_HTTP_CONNECTIONS * 2) this.#httpConnections.clear();
    const c: HttpConnection = { pid: e.pid, high, key: `${e.pid}:${e.sk}`, endpoint: undefined };
    this.#httpConnections.set(id, c);
    return c;
  }

  #onHttp(e: HttpEvent): void {
    this.#closing.lastNs = e.timestampNs;
    if (e.pid === this.#selfPid) return;
    /* One call object for every record (the tracker keeps what it needs of it, never the object). */
    const call = this.#call;
    const connection = this.#connectionOf(e);
    call.connection = connection.key;
    call.io = e.io;
    call.timestampNs = e.timestampNs;
    call.streamOffset = e.streamOffset;
    call.length = e.length;
    call.data = e.data;
    call.h2Stopped = (e.flags & HttpEventFlag.H2_STOPPED) !== 0;
    call.h2Midstream = (e.flags & HttpEventFlag.H2_MIDSTREAM) !== 0;
    call.h2Resumed = (e.flags & HttpEventFlag.H2_RESUMED) !== 0;
    /* The connection's endpoint while its records say the same: its task name and addresses are decoded only for the calls that become spans. */
    call.meta = connection.endpoint = e.endpointOr(connection.endpoint);
    const nowMs = this.#turnNowMs();
    let done;
    try {
      done = this.#http.push(call, nowMs);
    } finally {
      call.data = NO_BYTES;
      call.meta = NO_ENDPOINT;
      /* The bytes may be the ring's own (decodeHttpEventReused): a caller may keep the record, not them. */
      releaseData(e);
    }
    this.#offerExchanges(done, nowMs);
  }

  /**
   * performance.now(), read once per synchronous run of records (a ring poll's batch) and kept until the next
   * microtask: the tracker's idle ends (seconds) and the span budget (per second) need no finer time, and a clock
   * read costs more than handling a record's numbers. A run's records all fall in one budget window.
   */
  #turnNowMs(): number {
    if (this.#turnMs < 0) {
      this.#turnMs = performance.now();
      queueMicrotask(this.#endTurn);
    }
    return this.#turnMs;
  }

  readonly #endTurn = (): void => {
    this.#turnMs = -1;
  };

  /** How exchanges become spans; rebuilt when the configuration changes. */
  #newSpanContext(c: NetworkConfig): SpanContext {
    return {
      toEpochNs: (ns) => this.#clock.toEpochNs(ns),
      describe: (pid, comm) => this.#labeler.describe(pid, comm),
      scope: SCOPE,
      queryRedaction: c.http_query_redaction,
      /* The RED aggregator of the moment (replaced when its configuration changes): spans take their series' routes
       * (with http_metrics off, routes of their own within http_max_routes). */
      route: (resource, path, truncated) => this.#red.spanRoute(resource, path, truncated, !this.#cfg.http_metrics),
    };
  }

  /** `nowMs`: performance.now() of the caller, when it just took it (for the span budget). */
  #offerExchanges(exchanges: ReadonlyArray<HttpExchange<EndpointMeta>>, nowMs?: number): void {
    for (const x of exchanges) {
      if (x.rpc) this.#rpc.add(x);
      else if ((x.request.version === "2" && this.#cfg.http_metrics) || this.#userRed) this.#redFromUser(x);
      /* An HTTP/2 request reset before an answer is counted above and no span (an http_unanswered drop). */
      if (x.response.status === STATUS_RESET) {
        this.#http.release(x);
        continue;
      }
      this.counters.httpSpans++;
      /* Over the budget the span is not even built (HTTP/2 exchanges all reach user space, whatever the budget);
       * nothing refers to the exchange then, and an HTTP/2 stream's object goes back to the tracker for reuse. */
      if (this.#overBudget(nowMs)) {
        this.#http.release(x);
        continue;
      }
      const span = exchangeToSpan(x, this.#spanContext);
      /* A server's span waits for its client's while that is traced on this host too; a client's takes its own. */
      if (x.role === "server") {
        if (this.#links.holdServer(x, span, nowMs ?? this.#turnNowMs())) continue;
      } else this.#links.linkClient(x, span, nowMs ?? this.#turnNowMs());
      this.#release(x, span);
    }
  }

  /** A span made of exchange `x` goes to the export, its ids the exemplar of the RED series that counted `x`. */
  #release(x: HttpExchange<EndpointMeta>, span: SpanItem): void {
    this.#push(span);
    if (x.rpc || !(this.#redMaps || this.#userRed)) return;
    const method = redMethod(x.request.method);
    const server = x.role === "server";
    const scheme = x.meta.tls ? "https" : undefined;
    this.#red.exemplar(
      server
        ? { pid: x.meta.pid, role: Role.SERVER, method, status: x.response.status, path: x.request.path, peerPort: x.meta.localPort, scheme }
        : { pid: x.meta.pid, role: Role.CLIENT, method, status: x.response.status, peer: x.meta.remoteAddress, peerPort: x.meta.remotePort, scheme },
      { timeUnixNano: span.endTimeUnixNano, value: Number(span.endTimeUnixNano - span.startTimeUnixNano) / 1e9, traceId: span.traceId, spanId: span.spanId },
    );
  }

  /**
   * An exchange the kernel's RED maps do not count into the RED metrics, whatever the span budget: HTTP/2 streams
   * (the maps count HTTP/1.x only), and every exchange when RED is counted in user space (userRedCounted).
   */
  #redFromUser(x: HttpExchange<EndpointMeta>): void {
    const durationNs = exchangeDurationNs(x);
    const m = x.meta;
    /* One key object refilled for every exchange (the aggregator copies what it keeps). */
    const k = this.#redKey;
    k.pid = m.pid;
    k.method = redMethod(x.request.method);
    k.status = x.response.status;
    k.scheme = m.tls ? "https" : undefined;
    if (x.role === "server") {
      k.role = Role.SERVER;
      k.peer = this.#serverPeer(m.remoteAddress);
      k.peerPort = m.localPort;
      this.#red.addExchange(k, x.request.path, durationNs);
    } else {
      k.role = Role.CLIENT;
      k.peer = m.remoteAddress;
      k.peerPort = m.remotePort;
      this.#red.addExchange(k, undefined, durationNs);
    }
  }

  /** A server's RED peer: the client's address when loopback or private, else "" (the last address's answer kept). */
  #serverPeer(address: string): string {
    if (address !== this.#lastClientAddress) {
      this.#lastClientAddress = address;
      this.#lastServerPeer = addressClass(address) === "public" ? "" : address;
    }
    return this.#lastServerPeer;
  }

  /**
   * One plaintext call of a TLS connection (the `tls` set): fed to the same exchange tracker and spans as
   * cleartext, keyed by the SSL object (its socket's bytes are ciphertext), with url.scheme https.
   */
  handleTls(e: TlsEvent): void {
    this.#tlsExits.lastNs = e.timestampNs;
    if (e.pid === this.#selfPid) return;
    const connection = `tls:${e.pid}:${e.ssl}`;
    const call: CapturedCall<EndpointMeta> = {
      connection,
      io: e.io,
      timestampNs: e.timestampNs,
      streamOffset: e.streamOffset,
      length: e.length,
      data: e.data,
      meta: this.#tlsEndpoint(connection, e),
      h2Stopped: e.h2Stopped,
      h2Midstream: e.h2Midstream,
      h2Resumed: e.h2Resumed,
    };
    this.#offerExchanges(this.#http.push(call, performance.now()));
  }

  /**
   * The endpoint of a TLS connection, one object for all its calls: over a memory BIO the socket (and so the
   * addresses) becomes known after the connection's first calls, or is corrected later (the kernel's CONN_INFERRED),
   * and the exchanges already begun take it from here. Another socket at a stream's start is another connection
   * (the SSL object reused): a new endpoint.
   */
  #tlsEndpoint(connection: string, e: TlsEvent): EndpointMeta {
    let m = this.#tlsEndpoints.get(connection);
    const known = m !== undefined && m.remotePort !== 0;
    const other = e.socketKnown && known && (m!.remotePort !== e.remotePort || m!.localPort !== e.localPort || m!.remoteAddress !== e.remoteAddress);
    if (m === undefined || (other && e.streamOffset === 0)) {
      m = { pid: e.pid, comm: e.comm, localAddress: e.localAddress, localPort: e.localPort, remoteAddress: e.remoteAddress, remotePort: e.remotePort, tls: true };
      if (this.#tlsEndpoints.size >= MAX_HTTP_CONNECTIONS && !this.#tlsEndpoints.has(connection)) this.#tlsEndpoints.delete(this.#tlsEndpoints.keys().next().value as string);
      this.#tlsEndpoints.set(connection, m);
    } else if (e.socketKnown && (!known || other)) {
      m.localAddress = e.localAddress;
      m.localPort = e.localPort;
      m.remoteAddress = e.remoteAddress;
      m.remotePort = e.remotePort;
    }
    return m;
  }

  /**
   * Closes the TLS connections of a process that exited (a response delimited by the close ends there), CLOSE_GRACE_MS
   * later and once its last plaintext records were handled: they come through another ring buffer and may be read
   * after the exit.
   */
  tlsProcessExited(pid: number, exitNs: bigint, caughtUp: () => boolean): void {
    this.#tlsCaughtUp = caughtUp;
    this.#tlsExits.add(`tls:${pid}:`, exitNs, performance.now());
  }

  #closeTlsProcess(prefix: string, exitNs: bigint): void {
    for (const key of this.#tlsEndpoints.keys()) if (key.startsWith(prefix)) this.#tlsEndpoints.delete(key);
    this.#offerExchanges(this.#http.closeMatching(prefix, exitNs));
  }

  /** HTTP exchanges lost in user space since the last call, as span drops by reason. */
  #countHttpDrops(): void {
    const c = this.#http.counters;
    const h2 = this.#http.h2Counters;
    const unparsed = c.unparsed - this.#httpDropsSeen.unparsed;
    const unanswered = c.unanswered + h2.unanswered - this.#httpDropsSeen.unanswered;
    const h2Lost = h2.lostDirections - this.#httpDropsSeen.h2Lost;
    const h2Stopped = h2.stoppedDirections - this.#httpDropsSeen.h2Stopped;
    this.#httpDropsSeen.h2Stopped = h2.stoppedDirections;
    if (h2Stopped > 0) this.#ctx.metrics.spans.dropped.inc({ reason: SPAN_RATE_LIMIT_REASON }, h2Stopped);
    this.#httpDropsSeen.unparsed = c.unparsed;
    this.#httpDropsSeen.unanswered = c.unanswered + h2.unanswered;
    this.#httpDropsSeen.h2Lost = h2.lostDirections;
    if (h2Lost > 0) this.#ctx.metrics.spans.dropped.inc({ reason: SPAN_HTTP2_STATE_LOST_REASON }, h2Lost);
    if (unparsed > 0) this.#ctx.metrics.spans.dropped.inc({ reason: SPAN_HTTP_UNPARSED_REASON }, unparsed);
    if (unanswered > 0) this.#ctx.metrics.spans.dropped.inc({ reason: SPAN_HTTP_UNANSWERED_REASON }, unanswered);
  }

  #offer(span: SpanItem): void {
    if (!this.#overBudget()) this.#push(span);
  }

  /** Takes one span from the per-second budget; false when it is spent (the drop is counted). */
  #overBudget(nowMs?: number): boolean {
    if (this.#budget.take(nowMs)) return false;
    this.counters.dropped++;
    /* Counted once per synchronous run of drops (an HTTP/2 storm drops thousands per ring batch), still exactly. */
    if (this.#rateDropsPending++ === 0) queueMicrotask(this.#countRateDrops);
    return true;
  }

  readonly #countRateDrops = (): void => {
    const n = this.#rateDropsPending;
    this.#rateDropsPending = 0;
    if (n > 0) this.#ctx.metrics.spans.dropped.inc({ reason: SPAN_RATE_LIMIT_REASON }, n);
  };

  #push(span: SpanItem): void {
    this.#pendingSpans.push(span);
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      queueMicrotask(() => this.#flushSpans());
    }
  }

  #flushSpans(): void {
    this.#flushScheduled = false;
    if (this.#pendingSpans.length === 0) return;
    const spans = this.#pendingSpans;
    this.#pendingSpans = [];
    this.#ctx.pipeline.submit("traces", spans);
  }

  /** Exports the connection, RPC and RED metrics of the interval now (also called by the timer). */
  exportMetrics(): number {
    const now = this.#clock.nowEpochNs();
    this.#takeRed();
    const points = [...this.#connections.collect(now), ...this.#rpc.collect(now), ...this.#red.collect(this.#redStartNs, now)];
    /* Responses counted before now and still moving no longer lengthen what was just exported. */
    this.#redMaps?.closeInterval();
    this.#redStartNs = now;
    if (points.length > 0) this.#ctx.pipeline.submit("metrics", points);
    return points.length;
  }

  /** Reads the kernel's counters (exchanges the kernel did not capture, over the per-second budget, are span drops) and RED counts. */
  #pollStats(): void {
    const nowMs = performance.now();
    /* A close is read from conn_events while the connection's last HTTP records may still wait in http_events (or in
     * its pump's backlog, seconds behind when decoding fell behind): closing it earlier would drop their streams. */
    this.#closing.applyDue(nowMs, () => this.#inner.caughtUp("http_events"));
    this.#tlsExits.applyDue(nowMs, this.#tlsCaughtUp);
    this.#offerExchanges(this.#http.flushIdle(nowMs - HTTP_IDLE_END_MS));
    this.#links.releaseDue(nowMs);
    this.#countHttpDrops();
    /* Taken every second, not only per export interval: processes are described while they still run. */
    this.#takeRed();
    const stats = this.#set?.object.map("stats");
    if (!stats) return;
    try {
      const m = this.#ctx.metrics;
      const { refused, uncounted } = this.#kernelStats.take(stats, { spans: m.spans.dropped, network: m.networkDropped, midstream: m.http2Midstream, resumed: m.http2Resumed });
      this.counters.kernelSampledOut += refused;
      this.#dropWarnings.note(uncounted, nowMs, this.#host?.logger, { max_connections: this.#cfg.max_connections });
    } catch (e) {
      this.#host?.logger.warn("reading network stats failed", { error: (e as Error).message });
    }
  }

  #startTimers(): void {
    this.#stopTimers();
    this.#metricsTimer = setInterval(() => this.exportMetrics(), msOf(this.#cfg, "metrics_interval"));
    this.#statsTimer = setInterval(() => this.#pollStats(), STATS_POLL_MS);
    this.#metricsTimer.unref?.();
    this.#statsTimer.unref?.();
  }

  #stopTimers(): void {
    if (this.#metricsTimer) clearInterval(this.#metricsTimer);
    if (this.#statsTimer) clearInterval(this.#statsTimer);
    this.#metricsTimer = undefined;
    this.#statsTimer = undefined;
  }

  async start(host: ComponentHost): Promise<void> {
    this.#host = host;
    await this.#inner.start(host);
    if (this.#cfg.enabled && this.#ctx.config.agent.ebpf.enabled) this.#startTimers();
    // A flush (POST /admin/flush) takes the interval's connection metrics and the spans not yet submitted.
    this.#removeFlushSource ??= this.#ctx.pipeline.addFlushSource?.(() => {
      this.#links.releaseDue(0, true);
      this.#flushSpans();
      this.exportMetrics();
    });
  }

  async shutdown(deadline: AbortSignal): Promise<void> {
    this.#removeFlushSource?.();
    this.#removeFlushSource = undefined;
    this.#stopTimers();
    await this.#inner.shutdown(deadline);
    /* Responses still open end at their last call seen; requests never answered are counted. */
    this.#closing.clear();
    this.#tlsExits.clear();
    this.#tlsEndpoints.clear();
    this.#offerExchanges(this.#http.closeMatching(""));
    this.#links.releaseDue(0, true);
    this.#countHttpDrops();
    this.#flushSpans();
    this.exportMetrics();
  }

  async reload(next: Config, previous: Config): Promise<void> {
    const a = networkOf(previous);
    const b = networkOf(next);
    this.#cfg = b;
    this.#budget.perSecond = b.max_spans_per_second;
    this.#spanContext = this.#newSpanContext(b);
    const redKey = (c: NetworkConfig) => JSON.stringify([c.http_routes, c.http_routes_by_service, c.http_max_routes, c.http_duration_buckets, c.http_body_sizes, c.http_body_size_buckets]);
    if (redKey(a) !== redKey(b)) {
      this.exportMetrics();
      this.#red = this.#newRed(b);
    }
    if (a.max_series !== b.max_series) {
      this.exportMetrics();
      this.#connections = this.#newConnections(b);
    }
    const rebuild = kernelKey(a) !== kernelKey(b) && this.#host !== undefined;
    this.#inner = await reloadSet(this.#inner, rebuild, () => this.#newInner(b), this.#host, next, previous);
    if (!rebuild) this.#inner.setVariables(networkLimits(kernelExchangesPerSecond(b), b.http2_records_per_second));
    if (b.enabled && next.agent.ebpf.enabled) this.#startTimers();
    else {
      this.#stopTimers();
      this.#links.releaseDue(0, true);
      this.exportMetrics();
    }
  }
}
