/**
 * RED metrics of HTTP exchanges from what the kernel counted (src/collectors/network/red-maps.ts): per interval,
 * `http.server.request.duration` and `http.client.request.duration` histograms (seconds, DELTA) under the resource
 * of the workload that served or sent the requests, with http.request.method, http.response.status_code,
 * http.route (server; templated by RouteTemplater), error.type (5xx, connection_closed for a request whose connection
 * closed before a response, stream_reset for an HTTP/2 request reset before one), server.port (the listening port on the server
 * side) and server.address (client).
 * Histogram points carry exemplars: the trace and span ids of spans sampled from the same series.
 * A service graph between workloads: `traces_service_graph_request_total` and `..._failed_total` per (client,
 * server) edge, `..._server_seconds` and `..._client_seconds` as seen by each side; peers that are neither on this
 * host nor known to discovery are named by address class (loopback, private, public), never by address.
 */
import { networkInterfaces } from "node:os";
import type { Attributes } from "../../../export/types";
import { Temporality, type Exemplar, type MetricPointItem, type Scope, type TemporalityValue } from "../../../export/model";
import { UNKNOWN_SERVICE, UNKNOWN_WORKLOAD } from "../../../workloads/identity";
import { bucketIndex } from "../connections";
import type { ProcessLabels } from "../labels";
import { ResourceKeys } from "../resource-keys";
import { RED_PATH_BYTES, RED_PATH_OVERFLOW, Role, type RedBodyEntry, type RedCounts, type RedEntry, type RedKey, type RoleValue } from "../red-maps";
import { OVERFLOW_ROUTE, RouteTemplater } from "./routes";
import { STATUS_RESET } from "./parser";
import type { NetworkConfig } from "../config";

export const METRIC_SERVER_DURATION = "http.server.request.duration";
export const METRIC_CLIENT_DURATION = "http.client.request.duration";
/** Body size histograms (off by default: agent.ebpf.network.http_body_sizes), per duration metric: request's, response's. */
export const BODY_SIZE_METRICS = {
  [METRIC_SERVER_DURATION]: ["http.server.request.body.size", "http.server.response.body.size"],
  [METRIC_CLIENT_DURATION]: ["http.client.request.body.size", "http.client.response.body.size"],
} as const;
export const METRIC_GRAPH_TOTAL = "traces_service_graph_request_total";
export const METRIC_GRAPH_FAILED = "traces_service_graph_request_failed_total";
export const METRIC_GRAPH_SERVER_SECONDS = "traces_service_graph_request_server_seconds";
export const METRIC_GRAPH_CLIENT_SECONDS = "traces_service_graph_request_client_seconds";

/** The HTTP semantic conventions' default duration buckets, seconds. */
export const DEFAULT_DURATION_BOUNDS_SECONDS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];
/** error.type of a request whose connection closed before any response (status 0 from the kernel). */
export const TRANSPORT_ERROR = "connection_closed";
/** error.type of an HTTP/2 request whose stream was reset before an answer (STATUS_RESET). */
export const STREAM_RESET_ERROR = "stream_reset";
/** Listening ports remembered (local port -> the workload serving it). */
const MAX_LISTENERS = 65_536;
/** Keys of HTTP/2 exchanges summed before they are added (addExchange). */
const MAX_PENDING_KEYS = 1024;
/** Client peers (address:port) per service at most; further ones count in one overflow series. */
const DEFAULT_MAX_PEERS = 1000;

/** Address class of a peer not known by name. */
export function addressClass(address: string): "loopback" | "private" | "public" {
  if (address === "") return "public";
  if (address === "::1" || address.startsWith("127.")) return "loopback";
  if (/^(10\.|192\.168\.|172\.(1[6-9]|2\d|3[01])\.|f[cd][0-9a-f]{2}:|fe[89ab][0-9a-f]:)/i.test(address)) return "private";
  return "public";
}

/** The addresses of this host's interfaces (in the agent's network namespace). */
export function localAddresses(): Set<string> {
  const out = new Set<string>();
  try {
    for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) out.add(a.address);
  } catch {
    /* no interface list: loopback is still known by class */
  }
  return out;
}

export interface RedOptions {
  routes: RouteTemplater;
  /** Histogram bounds, seconds. */
  boundsSeconds: readonly number[];
  /** Labels and workload resource of a pid. */
  describe(pid: number): ProcessLabels;
  /** The path bytes of a server key's path hash. */
  path(hash: bigint): { path: string; truncated: boolean } | undefined;
  /** A name discovery knows for a peer (address, port; port 0: any), else undefined. */
  serviceAt?(address: string, port: number): string | undefined;
  scope?: Scope;
  maxPeersPerService?: number;
  /** Body size histogram bounds (bytes) when body sizes are counted (addBodies). */
  bodyBoundsBytes?: readonly number[];
}

/** A RedAggregator's options from the network configuration (routes, bounds), the rest as given. */
export function redOptionsOf(c: NetworkConfig, o: Pick<RedOptions, "describe" | "path" | "serviceAt" | "scope">): RedOptions {
  return {
    routes: new RouteTemplater({ templates: c.http_routes, byService: c.http_routes_by_service, maxRoutes: c.http_max_routes }),
    boundsSeconds: c.http_duration_buckets,
    ...(c.http_body_sizes ? { bodyBoundsBytes: c.http_body_size_buckets } : {}),
    ...o,
  };
}

interface Series {
  name: string;
  attributes: Attributes;
  resource: Attributes | undefined;
  count: number;
  sumNs: number;
  buckets: number[];
  exemplar?: Exemplar;
  /** Body sizes of the series' exchanges (sumNs holds bytes). */
  body?: { request: RedCounts; response: RedCounts };
}

interface GraphEdge {
  client: string;
  server: string;
  resource: Attributes | undefined;
  total: number;
  failed: number;
  client_seconds?: RedCounts;
  server_seconds?: RedCounts;
}

/** What identifies a series apart from its workload: role, method, status and route or peer. */
export interface SeriesRef {
  pid: number;
  role: RoleValue;
  method: string;
  status: number;
  /** Server: the request's path (not templated); client: unused. */
  path?: string;
  /** The path may have been cut by the kernel's capture (RED_PATH_BYTES). */
  truncated?: boolean;
  /** Server: the kernel had no room for the path's own key (route OVERFLOW_ROUTE). */
  overflow?: boolean;
  /** Client: the server's address and port; server: peerPort is the local (listening) port. */
  peer?: string;
  peerPort?: number;
  /** "https" for exchanges seen through the TLS capture (url.scheme); cleartext ones carry no url.scheme. */
  scheme?: "https";
}

/** What #describe finds of a series: its key in the interval's map and what its attributes are built from. */
interface SeriesIdentity {
  key: string;
  name: string;
  resource: Attributes | undefined;
  service: string;
  /** Server: the route, if the path gave one. */
  route?: string;
  /** Client: the peer found no room among the service's peers (one overflow series). */
  peerOverflow: boolean;
}

/** Series found for exemplars, direct-mapped by the span's fields (a power of two). */
const EXEMPLAR_SLOTS = 256;

/** What an exemplar's series was found from: the span's fields, and what the lookup read besides them. */
interface ExemplarSlot {
  readonly ref: SeriesRef;
  /** describe(pid).resource when found. */
  readonly resource: Attributes | undefined;
  /** The aggregator's and the route templater's versions when found. */
  readonly version: number;
  readonly routes: number;
  readonly series: Series;
}

/** The exemplar slot of a series ref: a hash of its numbers and of its path's or peer's length and two characters. */
function exemplarSlotOf(r: SeriesRef): number {
  const s = r.path ?? r.peer ?? "";
  const n = s.length;
  let h = Math.imul(r.pid ^ (r.status << 20), 0x9e3779b1) ^ Math.imul((r.peerPort ?? 0) | (r.role << 16), 0x85ebca6b) ^ Math.imul(n, 0xc2b2ae35);
  if (n > 0) h ^= Math.imul(s.charCodeAt(n - 1) | (s.charCodeAt(n >> 1) << 8), 0x27d4eb2f);
  h ^= h >>> 15;
  return h & (EXEMPLAR_SLOTS - 1);
}

/** Whether two refs name the same series under the same workload, route table and peers. */
function sameRef(a: SeriesRef, b: SeriesRef): boolean {
  return (
    a.pid === b.pid &&
    a.role === b.role &&
    a.method === b.method &&
    a.status === b.status &&
    a.peerPort === b.peerPort &&
    a.path === b.path &&
    a.peer === b.peer &&
    a.truncated === b.truncated &&
    a.overflow === b.overflow &&
    a.scheme === b.scheme
  );
}

const serviceName = (r: Attributes | undefined) => (typeof r?.["service.name"] === "string" ? (r["service.name"] as string) : UNKNOWN_SERVICE);

export class RedAggregator {
  #series = new Map<string, Series>();
  #edges = new Map<string, GraphEdge>();
  readonly #resourceKeys = new ResourceKeys();
  readonly #listeners = new Map<number, string>();
  readonly #peers = new Map<string, Set<string>>();
  readonly #local = localAddresses();
  readonly #counted = { server: 0, client: 0 };
  /** HTTP/2 exchanges summed per key, waiting to be added (addExchange). */
  #pending = new Map<string, RedEntry & { path?: string }>();
  /** The pending entry the last exchange of each role went to (by RoleValue: a host's traced clients and servers take turns). */
  readonly #lastPending: Array<(RedEntry & { path?: string }) | undefined> = [undefined, undefined, undefined];
  /**
   * Series found for exemplars (exemplar): a span like one before finds its series here without #seriesOf's
   * strings and lookups. A slot holds while its pid's workload, the route templater (RouteTemplater.version) and
   * this aggregator's series and peers (#version) are as they were when it was filled.
   */
  readonly #exemplarSlots = new Array<ExemplarSlot | undefined>(EXEMPLAR_SLOTS).fill(undefined);
  /** Changes whenever a series lookup may find another series than before for the same ref: a new interval, a new peer. */
  #version = 0;

  constructor(private readonly o: RedOptions) {}

  #isLocal(address: string): boolean {
    return addressClass(address) === "loopback" || this.#local.has(address);
  }

  /**
   * Series identity of one key; `peek`: its route takes no room in the route table (RouteTemplater.peek). Its
   * attributes are built by #attributes only when the series is new (exemplars look series up once per sampled span).
   */
  #describe(k: SeriesRef, peek = false): SeriesIdentity {
    const who = this.o.describe(k.pid);
    const resource = who.resource ?? UNKNOWN_WORKLOAD;
    const service = serviceName(resource);
    const name = k.role === Role.SERVER ? METRIC_SERVER_DURATION : METRIC_CLIENT_DURATION;
    const head = `${this.#resourceKeys.of(resource)}\u0000${k.role}\u0000${k.method}\u0000${k.status}\u0000${k.scheme ?? ""}\u0000`;
    if (k.role === Role.SERVER) {
      const route = k.overflow ? OVERFLOW_ROUTE : k.path !== undefined ? this.#route(service, k.path, k.truncated === true, peek) : undefined;
      return { key: `${head}${route ?? ""}\u0000${k.peerPort ?? 0}`, name, resource, service, route, peerOverflow: false };
    }
    let peers = this.#peers.get(service);
    if (!peers) this.#peers.set(service, (peers = new Set()));
    const peer = `${k.peer}:${k.peerPort}`;
    if (!peers.has(peer) && peers.size >= (this.o.maxPeersPerService ?? DEFAULT_MAX_PEERS)) return { key: `${head}\u0000overflow`, name, resource, service, peerOverflow: true };
    if (!peek && !peers.has(peer)) {
      peers.add(peer);
      this.#version++;
    }
    return { key: `${head}${peer}`, name, resource, service, peerOverflow: false };
  }

  /**
   * The route of a server's `path` in service `service`: its first RED_PATH_BYTES (what the kernel's counts keep),
   * templated; `truncated`: cut inside its last segment before that. Undefined for a path that is no path (an
   * asterisk or absolute form).
   */
  #route(service: string, path: string, truncated: boolean, peek: boolean): string | undefined {
    if (!path.startsWith("/")) return undefined;
    const cut = truncated || path.length >= RED_PATH_BYTES;
    const head = path.slice(0, RED_PATH_BYTES);
    return peek ? this.o.routes.peek(service, head, cut) : this.o.routes.route(service, head, cut);
  }

  /**
   * http.route of a server span under workload `resource` (describe's) whose request path is `path`: the route of
   * the series that counts the span's exchange (taking no room, as exemplars do), none where that is the overflow
   * route. A span seen before its exchange is counted gets the route the path would take then; the counts, taken
   * each second in another order, may fill the service's routes first (then the span's route has no series).
   * `uncounted`: no exchange is counted (RED metrics off): the span's route takes room itself, so that spans too
   * stay within the service's maxRoutes routes.
   */
  spanRoute(resource: Attributes | undefined, path: string, truncated: boolean, uncounted = false): string | undefined {
    const route = this.#route(serviceName(resource ?? UNKNOWN_WORKLOAD), path, truncated, !uncounted);
    return route === OVERFLOW_ROUTE ? undefined : route;
  }

  /** The attributes of a new series (see #describe). */
  #attributes(k: SeriesRef, d: SeriesIdentity): Attributes {
    const attributes: Attributes = { "http.request.method": k.method };
    if (k.status > 0) attributes["http.response.status_code"] = k.status;
    if (k.scheme === "https") attributes["url.scheme"] = "https";
    if (k.status >= 500) attributes["error.type"] = String(k.status);
    else if (k.status === 0) attributes["error.type"] = TRANSPORT_ERROR;
    else if (k.status === STATUS_RESET) attributes["error.type"] = STREAM_RESET_ERROR;
    if (k.role === Role.SERVER) {
      if (d.route !== undefined) attributes["http.route"] = d.route;
      attributes["server.port"] = k.peerPort ?? 0;
    } else if (d.peerOverflow) {
      attributes["otel.metric.overflow"] = true;
    } else {
      attributes["server.address"] = k.peer ?? "";
      attributes["server.port"] = k.peerPort ?? 0;
    }
    return attributes;
  }

  #seriesOf(ref: SeriesRef, peek = false): { s: Series; service: string; resource: Attributes | undefined } {
    const d = this.#describe(ref, peek);
    let s = this.#series.get(d.key);
    if (!s) this.#series.set(d.key, (s = { name: d.name, attributes: this.#attributes(ref, d), resource: d.resource, count: 0, sumNs: 0, buckets: new Array<number>(this.o.boundsSeconds.length + 1).fill(0) }));
    return { s, service: d.service, resource: d.resource };
  }

  #add(s: { count: number; sumNs: number; buckets: number[] }, c: RedCounts): void {
    s.count += c.count;
    s.sumNs += c.sumNs;
    for (let i = 0; i < s.buckets.length; i++) s.buckets[i]! += c.buckets[i] ?? 0;
  }

  #edge(client: string, server: string, resource: Attributes | undefined): GraphEdge {
    const key = `${this.#resourceKeys.of(resource)}\u0000${client}\u0000${server}`;
    let e = this.#edges.get(key);
    if (!e) this.#edges.set(key, (e = { client, server, resource, total: 0, failed: 0 }));
    return e;
  }

  #ref(k: RedKey, path?: string): SeriesRef {
    const scheme = k.scheme === "https" ? ({ scheme: "https" } as const) : {};
    if (k.role === Role.CLIENT) return { pid: k.pid, role: k.role, method: k.method, status: k.status, peer: k.peer, peerPort: k.peerPort, ...scheme };
    const base = { pid: k.pid, role: k.role, method: k.method, status: k.status, peerPort: k.peerPort, ...scheme };
    if (path !== undefined) return { ...base, path };
    if (k.pathHash === RED_PATH_OVERFLOW) return { ...base, overflow: true };
    const p = k.pathHash !== 0n ? this.o.path(k.pathHash) : undefined;
    return { ...base, path: p?.path, truncated: p?.truncated };
  }

  /**
   * Adds one exchange that user space saw and the kernel's maps do not count (HTTP/2 streams): the same series
   * and service graph as kernel-counted ones, the server's path as parsed (templated like the others). Exchanges
   * are summed per key first and added as one batch before the next kernel batch, collect or `counted` (up to
   * MAX_PENDING_KEYS keys wait), so that one exchange costs a key and a map lookup rather than a series lookup, and
   * one with the same key as the last of its role neither. `key` is not kept (a caller may refill one object).
   */
  addExchange(key: Omit<RedKey, "pathHash">, path: string | undefined, durationNs: number): void {
    const server = key.role === Role.SERVER;
    const last = this.#lastPending[key.role];
    let p: (RedEntry & { path?: string }) | undefined;
    if (last && last.key.pid === key.pid && last.key.role === key.role && last.key.method === key.method && last.key.status === key.status && last.key.peer === key.peer && last.key.peerPort === key.peerPort && last.key.scheme === key.scheme && last.path === (server ? (path ?? "") : undefined)) {
      /* The same key as the exchange before (the common case under load): no key string. */
      p = last;
    } else p = this.#pendingEntry(key, path, server);
    p.count++;
    p.sumNs += durationNs;
    p.buckets[bucketIndex(this.o.boundsSeconds, durationNs / 1e9)]!++;
  }

  #pendingEntry(key: Omit<RedKey, "pathHash">, path: string | undefined, server: boolean): RedEntry & { path?: string } {
    const id = `${key.pid}\u0000${key.role}\u0000${key.method}\u0000${key.status}\u0000${key.peer}\u0000${key.peerPort}\u0000${key.scheme ?? ""}\u0000${server ? (path ?? "") : ""}`;
    let p = this.#pending.get(id);
    if (!p) {
      if (this.#pending.size >= MAX_PENDING_KEYS) this.#flushPending();
      const copy: RedKey = { pathHash: 0n, pid: key.pid, status: key.status, method: key.method, role: key.role, peer: key.peer, peerPort: key.peerPort };
      if (key.scheme !== undefined) copy.scheme = key.scheme;
      p = { key: copy, path: server ? (path ?? "") : undefined, count: 0, sumNs: 0, buckets: new Array<number>(this.o.boundsSeconds.length + 1).fill(0) };
      this.#pending.set(id, p);
    }
    this.#lastPending[key.role] = p;
    return p;
  }

  /** Exchanges counted since creation, per role (for tests and status). */
  get counted(): { server: number; client: number } {
    this.#flushPending();
    return this.#counted;
  }

  #flushPending(): void {
    if (this.#pending.size === 0) return;
    const entries = [...this.#pending.values()];
    this.#pending = new Map();
    this.#lastPending.fill(undefined);
    this.#addEntries(entries);
  }

  /** Adds what the kernel counted: server keys first (they teach which workload listens on which port). */
  add(entries: ReadonlyArray<RedEntry & { path?: string }>, overflow?: ReadonlyMap<RoleValue, RedCounts>): void {
    this.#flushPending();
    this.#addEntries(entries, overflow);
  }

  #addEntries(entries: ReadonlyArray<RedEntry & { path?: string }>, overflow?: ReadonlyMap<RoleValue, RedCounts>): void {
    const ordered = [...entries].sort((a, b) => a.key.role - b.key.role);
    for (const e of ordered) {
      const ref = this.#ref(e.key, e.path);
      const { s, service, resource } = this.#seriesOf(ref);
      this.#add(s, e);
      const failed = e.key.status >= 500 || e.key.status === 0 || e.key.status === STATUS_RESET ? e.count : 0;
      if (e.key.role === Role.SERVER) {
        this.#counted.server += e.count;
        if (this.#listeners.size < MAX_LISTENERS || this.#listeners.has(e.key.peerPort)) this.#listeners.set(e.key.peerPort, service);
        const peerLocal = e.key.peer !== "" && this.#isLocal(e.key.peer);
        const client = (e.key.peer !== "" ? this.o.serviceAt?.(e.key.peer, 0) : undefined) ?? addressClass(e.key.peer);
        const edge = this.#edge(client, service, resource);
        edge.server_seconds ??= { count: 0, sumNs: 0, buckets: new Array<number>(this.o.boundsSeconds.length + 1).fill(0) };
        this.#add(edge.server_seconds, e);
        /* A client on this host is traced and counts the request itself. */
        if (!peerLocal) {
          edge.total += e.count;
          edge.failed += failed;
        }
      } else {
        this.#counted.client += e.count;
        const local = this.#isLocal(e.key.peer);
        const server = (local ? this.#listeners.get(e.key.peerPort) : undefined) ?? this.o.serviceAt?.(e.key.peer, e.key.peerPort) ?? addressClass(e.key.peer);
        const edge = this.#edge(service, server, resource);
        edge.client_seconds ??= { count: 0, sumNs: 0, buckets: new Array<number>(this.o.boundsSeconds.length + 1).fill(0) };
        this.#add(edge.client_seconds, e);
        edge.total += e.count;
        edge.failed += failed;
      }
    }
    for (const [role, c] of overflow ?? []) {
      const name = role === Role.SERVER ? METRIC_SERVER_DURATION : METRIC_CLIENT_DURATION;
      const key = `\u0000kernel-overflow\u0000${role}`;
      let s = this.#series.get(key);
      const attributes: Attributes = role === Role.SERVER ? { "http.route": OVERFLOW_ROUTE, "otel.metric.overflow": true } : { "otel.metric.overflow": true };
      if (!s) this.#series.set(key, (s = { name, attributes, resource: UNKNOWN_WORKLOAD, count: 0, sumNs: 0, buckets: new Array<number>(this.o.boundsSeconds.length + 1).fill(0) }));
      this.#add(s, c);
      if (role === Role.SERVER) this.#counted.server += c.count;
      else this.#counted.client += c.count;
    }
  }

  /** Adds the body sizes the kernel counted (RedMaps.take's bodies) to the series of their keys. */
  addBodies(entries: ReadonlyArray<RedBodyEntry>): void {
    const zero = (): RedCounts => ({ count: 0, sumNs: 0, buckets: new Array<number>((this.o.bodyBoundsBytes?.length ?? 0) + 1).fill(0) });
    for (const e of entries) {
      const { s } = this.#seriesOf(this.#ref(e.key));
      s.body ??= { request: zero(), response: zero() };
      this.#add(s.body.request, e.request);
      this.#add(s.body.response, e.response);
    }
  }

  /**
   * Keeps a sampled span's ids as the exemplar of its series (the latest one per interval); `ref` is kept (read-only,
   * as the lookup's key: pass a new object for each). The span's path takes no route: spans are sampled from all exchanges, also those the kernel counted under its overflow key, and a route
   * taken for one of those would be a route without counts that leaves the service's counted paths none.
   */
  exemplar(ref: SeriesRef, e: Exemplar): void {
    const resource = this.o.describe(ref.pid).resource;
    const at = exemplarSlotOf(ref);
    const slot = this.#exemplarSlots[at];
    const routes = this.o.routes.version;
    if (slot !== undefined && slot.version === this.#version && slot.routes === routes && slot.resource === resource && sameRef(slot.ref, ref)) {
      slot.series.exemplar = e;
      return;
    }
    const { s } = this.#seriesOf(ref, true);
    s.exemplar = e;
    this.#exemplarSlots[at] = { ref, resource, version: this.#version, routes, series: s };
  }

  /** The body size points of series `s` (request's and response's, those with something counted). */
  #collectBody(s: Series, base: { startTimeUnixNano: bigint; timeUnixNano: bigint; temporality: TemporalityValue; scope?: Scope }, out: MetricPointItem[]): void {
    const names = BODY_SIZE_METRICS[s.name as keyof typeof BODY_SIZE_METRICS];
    if (!names || !s.body) return;
    const parts = [
      [names[0], s.body.request, "Size of HTTP request bodies."],
      [names[1], s.body.response, "Size of HTTP response bodies."],
    ] as const;
    for (const [name, c, description] of parts) {
      if (c.count <= 0) continue;
      out.push({
        type: "histogram",
        name,
        description,
        unit: "By",
        count: c.count,
        sum: c.sumNs,
        bucketCounts: c.buckets.map((x) => Math.max(0, x)),
        explicitBounds: [...(this.o.bodyBoundsBytes ?? [])],
        attributes: s.attributes,
        ...(s.resource ? { resource: s.resource } : {}),
        ...base,
      });
    }
  }

  /** Points of the interval [startNs, nowNs) (DELTA); series with nothing counted are left out. */
  collect(startNs: bigint, nowNs: bigint): MetricPointItem[] {
    this.#flushPending();
    const start = startNs < nowNs ? startNs : nowNs - 1n;
    const base = { startTimeUnixNano: start, timeUnixNano: nowNs, temporality: Temporality.DELTA, ...(this.o.scope ? { scope: this.o.scope } : {}) };
    const hist = { ...base, unit: "s", explicitBounds: [...this.o.boundsSeconds] };
    const out: MetricPointItem[] = [];
    for (const s of this.#series.values()) {
      if (s.body) this.#collectBody(s, base, out);
      if (s.count <= 0) continue;
      out.push({
        type: "histogram",
        name: s.name,
        description: s.name === METRIC_SERVER_DURATION ? "Duration of HTTP server requests." : "Duration of HTTP client requests.",
        count: s.count,
        sum: s.sumNs / 1e9,
        bucketCounts: s.buckets.map((x) => Math.max(0, x)),
        attributes: s.attributes,
        ...(s.exemplar ? { exemplars: [s.exemplar] } : {}),
        ...(s.resource ? { resource: s.resource } : {}),
        ...hist,
      });
    }
    for (const e of this.#edges.values()) {
      const attributes: Attributes = { client: e.client, server: e.server };
      const of = e.resource ? { resource: e.resource } : {};
      const sum = (name: string, description: string, value: number) =>
        out.push({ type: "sum", name, description, unit: "{request}", value, integer: true, monotonic: true, attributes, ...of, ...base });
      if (e.total > 0) sum(METRIC_GRAPH_TOTAL, "Requests between two services.", e.total);
      if (e.failed > 0) sum(METRIC_GRAPH_FAILED, "Failed (5xx) requests between two services.", e.failed);
      for (const [name, c, description] of [
        [METRIC_GRAPH_SERVER_SECONDS, e.server_seconds, "Request duration between two services, as the server saw it."],
        [METRIC_GRAPH_CLIENT_SECONDS, e.client_seconds, "Request duration between two services, as the client saw it."],
      ] as const) {
        if (!c || c.count <= 0) continue;
        out.push({ type: "histogram", name, description, count: c.count, sum: c.sumNs / 1e9, bucketCounts: c.buckets.map((x) => Math.max(0, x)), attributes, ...of, ...hist });
      }
    }
    this.#series = new Map();
    this.#edges = new Map();
    this.#version++;
    return out;
  }
}
