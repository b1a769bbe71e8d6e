import { describe, expect, test } from "bun:test";
import { STATUS_UNKNOWN, type HttpExchange } from "../../../../../src/collectors/network/http/parser";
import { RPC_DURATION_BOUNDS_MS, RpcMetrics } from "../../../../../src/collectors/network/http/rpc-metrics";
import { grpcIsError, type EndpointMeta } from "../../../../../src/collectors/network/http/spans";

const meta: EndpointMeta = { pid: 7, comm: "srv", localAddress: "127.0.0.1", localPort: 50051, remoteAddress: "127.0.0.1", remotePort: 40000 };
const call = (method: string, code: number | undefined, ms: number, role: "server" | "client" = "server"): HttpExchange<EndpointMeta> => ({
  role,
  request: { kind: "request", method: "POST", target: `/s.Svc/${method}`, path: `/s.Svc/${method}`, version: "2", host: undefined, complete: true },
  response: { kind: "response", status: 200, version: "2", complete: true },
  startNs: 1_000_000n,
  endNs: 1_000_000n + BigInt(ms * 1e6),
  meta,
  rpc: { system: "grpc", service: "s.Svc", method, statusCode: code },
});

describe("RPC duration metrics", () => {
  test("one DELTA histogram series per method and status, milliseconds in the conventions' bounds; overflow folds and is counted", () => {
    const m = new RpcMetrics({ maxSeries: 2, describe: () => ({ name: "srv", resource: undefined }) }, 0n);
    m.add(call("A", 0, 3));
    m.add(call("A", 0, 30));
    m.add(call("B", 5, 1));
    m.add(call("C", 0, 1));
    m.add({ ...call("D", 0, 1), rpc: undefined });
    const points = m.collect(10n);
    expect(points.map((p) => [p.name, p.attributes?.["rpc.method"], p.attributes?.["rpc.grpc.status_code"], p.type === "histogram" ? p.count : 0])).toEqual([
      ["rpc.server.duration", "A", 0, 2],
      ["rpc.server.duration", "B", 5, 1],
      ["rpc.server.duration", undefined, undefined, 1],
    ]);
    const a = points[0]!;
    if (a.type !== "histogram") throw new Error("histogram expected");
    expect(a.unit).toBe("ms");
    expect(a.explicitBounds).toEqual(RPC_DURATION_BOUNDS_MS);
    expect(a.bucketCounts[RPC_DURATION_BOUNDS_MS.indexOf(5)]).toBe(1);
    expect(a.bucketCounts[RPC_DURATION_BOUNDS_MS.indexOf(50)]).toBe(1);
    expect([a.min, a.max, a.sum]).toEqual([3, 30, 33]);
    expect(points[2]!.attributes?.["otel.metric.overflow"]).toBe(true);
    expect(m.overflowed).toBe(1);
    expect(m.collect(20n)).toEqual([]);
    m.add(call("A", 0, 1, "client"));
    const [c] = m.collect(30n);
    expect([c?.name, c?.attributes?.["server.address"], c?.attributes?.["server.port"], c?.startTimeUnixNano]).toEqual(["rpc.client.duration", "127.0.0.1", 40000, 20n]);
  });
});

describe("RPC metrics and spans of calls whose status is not known (decoded from a connection's middle)", () => {
  test("no rpc.grpc.status_code, a series apart from those with a status, and no error", () => {
    const m = new RpcMetrics({ maxSeries: 10, describe: () => ({ name: "srv", resource: undefined }) }, 0n);
    m.add(call("A", STATUS_UNKNOWN, 3));
    m.add(call("A", STATUS_UNKNOWN, 4));
    m.add(call("A", 0, 5));
    const points = m.collect(10n);
    expect(points.map((p) => [p.attributes?.["rpc.method"], "rpc.grpc.status_code" in (p.attributes ?? {}) ? p.attributes?.["rpc.grpc.status_code"] : "none", p.type === "histogram" ? p.count : 0])).toEqual([
      ["A", "none", 2],
      ["A", 0, 1],
    ]);
    expect([grpcIsError(true, STATUS_UNKNOWN), grpcIsError(false, STATUS_UNKNOWN), grpcIsError(false, undefined), grpcIsError(true, 13)]).toEqual([false, false, true, true]);
  });
});
