/**
 * RPC duration metrics of gRPC calls seen on HTTP/2 connections (RPC semantic conventions): `rpc.server.duration`
 * and `rpc.client.duration` histograms (milliseconds, DELTA, the conventions' recommended bounds) per rpc.system,
 * rpc.service, rpc.method, rpc.grpc.status_code, server.port (clients also server.address) and url.scheme (https for
 * calls over TLS; an addition to the conventions, which name no such attribute), under the resource of
 * the workload that made or served the call. Every call that completed counts, also one whose span the per-second
 * span budget dropped. Series beyond `maxSeries` per interval fold into one overflow series
 * (`otel.metric.overflow: true`). Pure apart from the clock values passed in.
 */
import type { Attributes } from "../../../export/types";
import { Temporality, type MetricPointItem, type Scope } from "../../../export/model";
import { bucketIndex } from "../connections";
import { ResourceKeys } from "../resource-keys";
import { STATUS_UNKNOWN, exchangeDurationNs, type HttpExchange } from "./parser";
import { rpcUrlScheme, type EndpointMeta } from "./spans";

export const METRIC_RPC_SERVER_DURATION = "rpc.server.duration";
export const METRIC_RPC_CLIENT_DURATION = "rpc.client.duration";
/** The RPC semantic conventions' recommended bounds for rpc.*.duration, milliseconds. */
export const RPC_DURATION_BOUNDS_MS = [0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000];

export interface RpcMetricsOptions {
  maxSeries: number;
  /** Bounded label (executable name) and workload resource of a pid. */
  describe(pid: number, comm: string): { name: string; resource: Attributes | undefined };
  scope?: Scope;
}

interface Series {
  name: string;
  attributes: Attributes;
  resource: Attributes | undefined;
  buckets: number[];
  sum: number;
  count: number;
  min: number;
  max: number;
}

export class RpcMetrics {
  readonly #series = new Map<string, Series>();
  readonly #resourceKeys = new ResourceKeys();
  #intervalStartNs: bigint;
  /** Calls folded into the overflow series since creation. */
  overflowed = 0;

  constructor(
    private readonly o: RpcMetricsOptions,
    startEpochNs: bigint,
  ) {
    this.#intervalStartNs = startEpochNs;
  }

  /** Counts one completed exchange if it is a gRPC call. */
  add(x: HttpExchange<EndpointMeta>): void {
    const rpc = x.rpc;
    if (!rpc) return;
    const m = x.meta;
    const server = x.role === "server";
    const who = this.o.describe(m.pid, m.comm);
    const attributes: Attributes = {
      "process.executable.name": who.name,
      "rpc.system": rpc.system,
      "rpc.service": rpc.service,
      "rpc.method": rpc.method,
      "network.transport": "tcp",
      "url.scheme": rpcUrlScheme(x),
      "server.port": server ? m.localPort : m.remotePort,
    };
    if (!server) attributes["server.address"] = m.remoteAddress;
    if (rpc.statusCode !== undefined && rpc.statusCode !== STATUS_UNKNOWN) attributes["rpc.grpc.status_code"] = rpc.statusCode;
    const name = server ? METRIC_RPC_SERVER_DURATION : METRIC_RPC_CLIENT_DURATION;
    let key = `${name}\u0000${this.#resourceKeys.of(who.resource)}\u0000${who.name}\u0000${rpc.service}\u0000${rpc.method}\u0000${rpc.statusCode ?? ""}\u0000${attributes["server.port"]}\u0000${attributes["server.address"] ?? ""}\u0000${attributes["url.scheme"]}`;
    let s = this.#series.get(key);
    if (!s && this.#series.size >= this.o.maxSeries) {
      this.overflowed++;
      key = `${name}\u0000overflow`;
      s = this.#series.get(key);
      if (!s) this.#series.set(key, (s = empty(name, { "otel.metric.overflow": true }, undefined)));
    }
    if (!s) this.#series.set(key, (s = empty(name, attributes, who.resource)));
    const ms = exchangeDurationNs(x) / 1e6;
    s.buckets[bucketIndex(RPC_DURATION_BOUNDS_MS, ms)]!++;
    s.sum += ms;
    s.count++;
    if (ms < s.min) s.min = ms;
    if (ms > s.max) s.max = ms;
  }

  /** Histogram points of the interval since the previous call (DELTA); nothing for an interval without calls. */
  collect(nowEpochNs: bigint): MetricPointItem[] {
    const start = this.#intervalStartNs < nowEpochNs ? this.#intervalStartNs : nowEpochNs - 1n;
    this.#intervalStartNs = nowEpochNs;
    const out: MetricPointItem[] = [];
    for (const s of this.#series.values()) {
      out.push({
        type: "histogram",
        name: s.name,
        unit: "ms",
        description: s.name === METRIC_RPC_SERVER_DURATION ? "Duration of inbound RPCs (gRPC over HTTP/2)." : "Duration of outbound RPCs (gRPC over HTTP/2).",
        temporality: Temporality.DELTA,
        count: s.count,
        sum: s.sum,
        min: s.min,
        max: s.max,
        bucketCounts: s.buckets,
        explicitBounds: RPC_DURATION_BOUNDS_MS,
        attributes: s.attributes,
        startTimeUnixNano: start,
        timeUnixNano: nowEpochNs,
        ...(this.o.scope ? { scope: this.o.scope } : {}),
        ...(s.resource ? { resource: s.resource } : {}),
      });
    }
    this.#series.clear();
    return out;
  }
}

function empty(name: string, attributes: Attributes, resource: Attributes | undefined): Series {
  return { name, attributes, resource, buckets: new Array<number>(RPC_DURATION_BOUNDS_MS.length + 1).fill(0), sum: 0, count: 0, min: Infinity, max: -Infinity };
}
