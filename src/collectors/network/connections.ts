/**
 * TCP connection telemetry from `conn_events`: delta metrics with bounded labels (process name, direction,
 * the service port, never the ephemeral one; for outbound connections `service.peer.name`, the remote service
 * where discovery knows its address, else the fixed bucket UNKNOWN_REMOTE_SERVICE, never an address) and one CLIENT span per outbound connection attempt
 * (`CONNECT address:port`, ending when it is established or fails). Label sets beyond `maxSeries` go to one
 * overflow series (`otel.metric.overflow: true`). Series are per workload: each point carries the resource of the
 * process it counts (the overflow series: unknown_service). Pure apart from the random span ids.
 */
import type { Attributes } from "../../export/types";
import { SpanKind, StatusCode, Temporality, type MetricPointItem, type Scope, type SpanItem } from "../../export/model";
import { AF_INET, ConnFlag, ConnKind, Direction, type ConnEvent } from "./decoders";
import type { ProcessLabeler } from "./labels";
import { ResourceKeys } from "./resource-keys";
import { UNKNOWN_WORKLOAD } from "../../workloads/identity";
import { randomId } from "./http/spans";

export const METRIC_OPENED = "network.tcp.connections.opened";
export const METRIC_CLOSED = "network.tcp.connections.closed";
export const METRIC_FAILED = "network.tcp.connections.failed";
export const METRIC_BYTES = "network.tcp.bytes";
export const METRIC_RETRANSMITS = "network.tcp.retransmits";
export const METRIC_CONNECT_DURATION = "network.tcp.connect.duration";
export const METRIC_CONNECTION_DURATION = "network.tcp.connection.duration";

/** service.peer.name of outbound connections to an address discovery does not know. */
export const UNKNOWN_REMOTE_SERVICE = "unknown";

/** Connect latency buckets, seconds. */
export const CONNECT_BOUNDS_SECONDS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];
/** Connection lifetime buckets, seconds. */
export const LIFETIME_BOUNDS_SECONDS = [0.001, 0.01, 0.1, 1, 10, 60, 300, 1800, 3600];

interface Series {
  attributes: Attributes;
  /** The workload the series is about (its points' resource). */
  resource: Attributes | undefined;
  opened: number;
  closed: number;
  failed: number;
  bytesSent: number;
  bytesRecv: number;
  retransmits: number;
  connect: number[];
  connectSum: number;
  connectCount: number;
  lifetime: number[];
  lifetimeSum: number;
  lifetimeCount: number;
}

/** The histogram bucket of `v`: the first bound it does not exceed (bounds.length: above them all). */
export function bucketIndex(bounds: readonly number[], v: number): number {
  let i = 0;
  while (i < bounds.length && v > bounds[i]!) i++;
  return i;
}

/** Label sets whose series is remembered without its key (ConnectionTelemetry's #recent). */
const RECENT_SERIES = 8;

const directionName = (d: number) => (d === Direction.OUTBOUND ? "outbound" : d === Direction.INBOUND ? "inbound" : "unknown");

export interface ConnectionOptions {
  maxSeries: number;
  labeler: ProcessLabeler;
  /** Epoch ns of a kernel monotonic timestamp. */
  toEpochNs(monotonicNs: bigint): bigint;
  /** Epoch ns when counting began: the start time of the first interval's points. */
  startEpochNs: bigint;
  /** A name for a remote endpoint when discovery knows it (a service), else undefined. */
  remoteService?(address: string, port: number): string | undefined;
  scope?: Scope;
}

export class ConnectionTelemetry {
  #series = new Map<string, Series>();
  /** The series of the label sets used last (emptied with #series). */
  #recent: Array<{ resource: Attributes | undefined; processName: string; direction: number; servicePort: number; service: string | undefined; series: Series }> = [];
  #recentNext = 0;
  /** A small number per workload resource object, for series keys. */
  readonly #resourceKeys = new ResourceKeys();
  #intervalStartNs: bigint;
  /** Label sets folded into the overflow series since creation. */
  overflowed = 0;

  constructor(private readonly o: ConnectionOptions) {
    this.#intervalStartNs = o.startEpochNs;
  }

  #seriesFor(e: ConnEvent, processName: string, resource: Attributes | undefined): Series {
    const outbound = e.direction === Direction.OUTBOUND;
    const servicePort = outbound ? e.remotePort : e.localPort;
    const service = outbound ? (this.o.remoteService?.(e.remoteAddress, e.remotePort) ?? UNKNOWN_REMOTE_SERVICE) : undefined;
    // The series of the last few label sets, found without building their key (events come in runs of a few sets).
    const recent = this.#recent;
    for (let i = 0; i < recent.length; i++) {
      const r = recent[i]!;
      if (r.resource === resource && r.servicePort === servicePort && r.direction === e.direction && r.processName === processName && r.service === service) return r.series;
    }
    const series = this.#findSeries(e, processName, resource, servicePort, service);
    const entry = { resource, processName, direction: e.direction, servicePort, service, series };
    if (recent.length < RECENT_SERIES) recent.push(entry);
    else recent[this.#recentNext++ % RECENT_SERIES] = entry;
    return series;
  }

  #findSeries(e: ConnEvent, processName: string, resource: Attributes | undefined, servicePort: number, service: string | undefined): Series {
    const attributes: Attributes = {
      "process.executable.name": processName,
      "network.connection.direction": directionName(e.direction),
      "network.transport": "tcp",
      "server.port": servicePort,
    };
    if (service) attributes["service.peer.name"] = service;
    let key = `${this.#resourceKeys.of(resource)}\u0000${processName}\u0000${attributes["network.connection.direction"]}\u0000${servicePort}\u0000${service ?? ""}`;
    if (!this.#series.has(key) && this.#series.size >= this.o.maxSeries) {
      this.overflowed++;
      key = "\u0000overflow";
      if (!this.#series.has(key)) this.#series.set(key, this.#empty({ "otel.metric.overflow": true }, UNKNOWN_WORKLOAD));
    }
    let s = this.#series.get(key);
    if (!s) this.#series.set(key, (s = this.#empty(attributes, resource)));
    return s;
  }

  #empty(attributes: Attributes, resource: Attributes | undefined): Series {
    return {
      attributes, resource, opened: 0, closed: 0, failed: 0, bytesSent: 0, bytesRecv: 0, retransmits: 0,
      connect: new Array<number>(CONNECT_BOUNDS_SECONDS.length + 1).fill(0), connectSum: 0, connectCount: 0,
      lifetime: new Array<number>(LIFETIME_BOUNDS_SECONDS.length + 1).fill(0), lifetimeSum: 0, lifetimeCount: 0,
    };
  }

  /** Accounts one event; returns the CONNECT span it ends, if any (outbound OPEN or FAILED). */
  apply(e: ConnEvent): SpanItem | undefined {
    if (e.flags & ConnFlag.IGNORED) return undefined;
    const who = this.o.labeler.describe(e.pid, e.comm);
    const s = this.#seriesFor(e, who.name, who.resource);
    const reportedOpen = (e.flags & ConnFlag.OPEN_REPORTED) !== 0;
    switch (e.kind) {
      case ConnKind.OPEN:
        s.opened++;
        if (e.direction === Direction.OUTBOUND && e.establishedNs > 0n) {
          const secs = Number(e.establishedNs - e.startNs) / 1e9;
          s.connect[bucketIndex(CONNECT_BOUNDS_SECONDS, secs)]!++;
          s.connectSum += secs;
          s.connectCount++;
          return this.#connectSpan(e, who.attributes, who.resource, e.establishedNs);
        }
        return undefined;
      case ConnKind.FAILED:
        s.failed++;
        return e.direction === Direction.OUTBOUND ? this.#connectSpan(e, who.attributes, who.resource, e.timestampNs) : undefined;
      case ConnKind.PROGRESS:
        s.bytesSent += Math.max(0, e.bytesSent - e.reportedSent);
        s.bytesRecv += Math.max(0, e.bytesRecv - e.reportedRecv);
        return undefined;
      case ConnKind.CLOSED: {
        if (!reportedOpen && !(e.flags & ConnFlag.PREEXISTING)) s.opened++;
        s.closed++;
        s.bytesSent += Math.max(0, e.bytesSent - e.reportedSent);
        s.bytesRecv += Math.max(0, e.bytesRecv - e.reportedRecv);
        s.retransmits += e.retransmits;
        if (!(e.flags & ConnFlag.PREEXISTING)) {
          const from = e.establishedNs > 0n ? e.establishedNs : e.startNs;
          const secs = Number(e.timestampNs - from) / 1e9;
          s.lifetime[bucketIndex(LIFETIME_BOUNDS_SECONDS, secs)]!++;
          s.lifetimeSum += secs;
          s.lifetimeCount++;
        }
        return undefined;
      }
    }
    return undefined;
  }

  #connectSpan(e: ConnEvent, processAttrs: Attributes, resource: Attributes | undefined, endNs: bigint): SpanItem {
    const failed = e.kind === ConnKind.FAILED;
    const attributes: Attributes = {
      ...processAttrs,
      "server.address": e.remoteAddress,
      "server.port": e.remotePort,
      "network.peer.address": e.remoteAddress,
      "network.peer.port": e.remotePort,
      "network.local.address": e.localAddress,
      "network.local.port": e.localPort,
      "network.transport": "tcp",
      "network.type": e.family === AF_INET || !e.remoteAddress.includes(":") ? "ipv4" : "ipv6",
    };
    const host = e.remoteAddress.includes(":") ? `[${e.remoteAddress}]` : e.remoteAddress;
    const span: SpanItem = {
      traceId: randomId(16),
      spanId: randomId(8),
      name: `CONNECT ${host}:${e.remotePort}`,
      kind: SpanKind.CLIENT,
      startTimeUnixNano: this.o.toEpochNs(e.startNs),
      endTimeUnixNano: this.o.toEpochNs(endNs),
      attributes,
      status: failed ? { code: StatusCode.ERROR, message: "connection failed" } : { code: StatusCode.UNSET },
    };
    if (failed) attributes["error.type"] = "connection_failed";
    if (this.o.scope) span.scope = this.o.scope;
    if (resource) span.resource = resource;
    return span;
  }

  /** Metric points for the interval since the previous call (DELTA); series with nothing new are left out. */
  collect(nowEpochNs: bigint): MetricPointItem[] {
    /* Never a start at or after the time, even for a clock that did not move (the conventions want start < time). */
    const start = this.#intervalStartNs < nowEpochNs ? this.#intervalStartNs : nowEpochNs - 1n;
    this.#intervalStartNs = nowEpochNs;
    const out: MetricPointItem[] = [];
    const base = { startTimeUnixNano: start, timeUnixNano: nowEpochNs, ...(this.o.scope ? { scope: this.o.scope } : {}) };
    for (const s of this.#series.values()) {
      const a = s.attributes;
      const of = s.resource ? { resource: s.resource } : {};
      const sum = (name: string, unit: string, description: string, value: number, attributes: Attributes) =>
        out.push({ type: "sum", name, unit, description, value, integer: true, temporality: Temporality.DELTA, monotonic: true, attributes, ...base, ...of });
      if (s.opened) sum(METRIC_OPENED, "{connection}", "TCP connections opened.", s.opened, a);
      if (s.closed) sum(METRIC_CLOSED, "{connection}", "TCP connections closed.", s.closed, a);
      if (s.failed) sum(METRIC_FAILED, "{connection}", "Outbound TCP connects that never got established.", s.failed, a);
      if (s.bytesSent) sum(METRIC_BYTES, "By", "Bytes moved by TCP connections (reported at most every 10 s while open, and at close).", s.bytesSent, { ...a, "network.io.direction": "transmit" });
      if (s.bytesRecv) sum(METRIC_BYTES, "By", "Bytes moved by TCP connections (reported at most every 10 s while open, and at close).", s.bytesRecv, { ...a, "network.io.direction": "receive" });
      if (s.retransmits) sum(METRIC_RETRANSMITS, "{segment}", "TCP segments retransmitted.", s.retransmits, a);
      if (s.connectCount) {
        out.push({ type: "histogram", name: METRIC_CONNECT_DURATION, unit: "s", description: "Outbound TCP connect latency (SYN sent to established).", temporality: Temporality.DELTA, count: s.connectCount, sum: s.connectSum, bucketCounts: s.connect, explicitBounds: CONNECT_BOUNDS_SECONDS, attributes: a, ...base, ...of });
      }
      if (s.lifetimeCount) {
        out.push({ type: "histogram", name: METRIC_CONNECTION_DURATION, unit: "s", description: "TCP connection lifetime (established to closed).", temporality: Temporality.DELTA, count: s.lifetimeCount, sum: s.lifetimeSum, bucketCounts: s.lifetime, explicitBounds: LIFETIME_BOUNDS_SECONDS, attributes: a, ...base, ...of });
      }
    }
    this.#series.clear();
    this.#recent = [];
    return out;
  }
}
