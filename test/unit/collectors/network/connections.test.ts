import { describe, expect, test } from "bun:test";
import { PerSecondBudget } from "../../../../src/collectors/network/budget";
import { ConnectionTelemetry, UNKNOWN_REMOTE_SERVICE, METRIC_BYTES, METRIC_CLOSED, METRIC_CONNECT_DURATION, METRIC_FAILED, METRIC_OPENED } from "../../../../src/collectors/network/connections";
import { ConnFlag, ConnKind, Direction, type ConnEvent } from "../../../../src/collectors/network/decoders";
import { ProcessLabeler } from "../../../../src/collectors/network/labels";
import type { MetricPointItem } from "../../../../src/export/model";

/** The workload's resource: one object per workload, as the registry gives it. */
const POD = { "k8s.pod.name": "api-0" };
const labeler = new ProcessLabeler({ forPid: (pid) => (pid === 10 ? { executableName: "api", containerId: "c".repeat(64) } : undefined) }, { forPid: (pid) => (pid === 10 ? POD : undefined) });

function ev(p: Partial<ConnEvent>): ConnEvent {
  return {
    type: "conn", kind: ConnKind.OPEN, timestampNs: 2_000_000n, sk: 1n, startNs: 1_000_000n, establishedNs: 1_500_000n, bytesSent: 0, bytesRecv: 0, cgroupId: 0n,
    reportedSent: 0, reportedRecv: 0, pid: 10, retransmits: 0, localAddress: "10.0.0.1", localPort: 45678, remoteAddress: "10.0.0.2", remotePort: 5432, family: 2,
    direction: Direction.OUTBOUND, flags: ConnFlag.OPEN_REPORTED, comm: "api-worker", ...p,
  };
}

const sumOf = (pts: MetricPointItem[], name: string) => pts.filter((p) => p.name === name).reduce((s, p) => s + (p.type === "histogram" ? p.count : p.value), 0);

describe("connection telemetry", () => {
  test("outbound open gives a CONNECT span with process, container and workload attributes", () => {
    const t = new ConnectionTelemetry({ maxSeries: 10, labeler, toEpochNs: (ns) => ns + 1_000_000_000n, startEpochNs: 0n });
    const span = t.apply(ev({}))!;
    expect(span.name).toBe("CONNECT 10.0.0.2:5432");
    expect(span.kind).toBe(3);
    expect(span.endTimeUnixNano - span.startTimeUnixNano).toBe(500_000n);
    expect(span.attributes).toMatchObject({ "process.pid": 10, "process.executable.name": "api", "container.id": "c".repeat(64), "server.port": 5432, "network.local.port": 45678 });
    expect(span.resource).toEqual({ "k8s.pod.name": "api-0" });
    const failed = t.apply(ev({ kind: ConnKind.FAILED, establishedNs: 0n, flags: 0, remoteAddress: "::1", family: 10 }))!;
    expect(failed.name).toBe("CONNECT [::1]:5432");
    expect(failed.status?.code).toBe(2);
  });

  test("metrics: opened, closed, failed, bytes, connect latency; labels never carry the ephemeral port", () => {
    const t = new ConnectionTelemetry({ maxSeries: 10, labeler, toEpochNs: (ns) => ns, startEpochNs: 0n });
    t.apply(ev({}));
    t.apply(ev({ kind: ConnKind.CLOSED, bytesSent: 100, bytesRecv: 2000, timestampNs: 9_000_000n }));
    t.apply(ev({ kind: ConnKind.FAILED, establishedNs: 0n, flags: 0, localPort: 45999 }));
    t.apply(ev({ kind: ConnKind.CLOSED, direction: Direction.INBOUND, flags: 0, localPort: 8080, remotePort: 61000 }));
    const pts = t.collect(5n);
    expect(sumOf(pts, METRIC_OPENED)).toBe(2); // the outbound one, and the inbound one whose open was never reported
    expect(sumOf(pts, METRIC_CLOSED)).toBe(2);
    expect(sumOf(pts, METRIC_FAILED)).toBe(1);
    expect(sumOf(pts, METRIC_CONNECT_DURATION)).toBe(1);
    expect(pts.filter((p) => p.name === METRIC_BYTES).map((p) => [p.attributes!["network.io.direction"], (p as { value: number }).value]).sort()).toEqual([["receive", 2000], ["transmit", 100]]);
    const ports = new Set(pts.map((p) => p.attributes!["server.port"]));
    expect(ports).toEqual(new Set([5432, 8080]));
    for (const p of pts) expect(Object.keys(p.attributes!)).not.toContain("client.port");
    // Every point is about the workload of its process.
    for (const p of pts) expect(p.resource).toBe(POD);
    expect(t.collect(6n)).toEqual([]);
  });

  test("PROGRESS records count the bytes since the previous report; CLOSED only the rest", () => {
    const t = new ConnectionTelemetry({ maxSeries: 10, labeler, toEpochNs: (ns) => ns, startEpochNs: 0n });
    t.apply(ev({ kind: ConnKind.PROGRESS, bytesSent: 100, bytesRecv: 1000 }));
    const first = t.collect(1n);
    expect(first.filter((p) => p.name === METRIC_BYTES).map((p) => (p as { value: number }).value).sort((a, b) => a - b)).toEqual([100, 1000]);
    t.apply(ev({ kind: ConnKind.PROGRESS, bytesSent: 150, bytesRecv: 1000, reportedSent: 100, reportedRecv: 1000 }));
    t.apply(ev({ kind: ConnKind.CLOSED, bytesSent: 160, bytesRecv: 1500, reportedSent: 150, reportedRecv: 1000 }));
    const second = t.collect(2n);
    expect(second.filter((p) => p.name === METRIC_BYTES).map((p) => [p.attributes!["network.io.direction"], (p as { value: number }).value]).sort()).toEqual([["receive", 500], ["transmit", 60]]);
  });

  test("label sets beyond maxSeries fold into one overflow series; ignored connections are skipped", () => {
    const t = new ConnectionTelemetry({ maxSeries: 2, labeler, toEpochNs: (ns) => ns, startEpochNs: 0n });
    for (let port = 1; port <= 5; port++) t.apply(ev({ remotePort: port, kind: ConnKind.FAILED, establishedNs: 0n }));
    expect(t.apply(ev({ flags: ConnFlag.IGNORED }))).toBeUndefined();
    const pts = t.collect(1n).filter((p) => p.name === METRIC_FAILED);
    expect(pts).toHaveLength(3);
    expect(pts.find((p) => p.attributes!["otel.metric.overflow"] === true)).toMatchObject({ value: 3 });
    expect(t.overflowed).toBe(3);
  });

  test("outbound series carry service.peer.name: the name discovery knows for the remote address, else one fixed bucket; inbound none", () => {
    const known = new Map([["10.0.0.2", "postgres"]]);
    const asked: Array<[string, number]> = [];
    const t = new ConnectionTelemetry({ maxSeries: 10, labeler, toEpochNs: (ns) => ns, startEpochNs: 0n, remoteService: (a, p) => (asked.push([a, p]), known.get(a)) });
    t.apply(ev({}));
    t.apply(ev({ sk: 2n, remoteAddress: "10.9.9.9", remotePort: 443 }));
    t.apply(ev({ sk: 3n, remoteAddress: "10.9.9.8", remotePort: 443 }));
    t.apply(ev({ sk: 4n, kind: ConnKind.CLOSED, direction: Direction.INBOUND, flags: 0, localPort: 8080, remoteAddress: "10.0.0.2", remotePort: 61000 }));
    const opened = t.collect(1n).filter((p) => p.name === METRIC_OPENED);
    expect(opened.map((p) => [p.attributes!["server.port"], p.attributes!["service.peer.name"], (p as { value: number }).value]).sort()).toEqual([
      [443, UNKNOWN_REMOTE_SERVICE, 2],
      [5432, "postgres", 1],
      [8080, undefined, 1],
    ]);
    expect(asked).toEqual([["10.0.0.2", 5432], ["10.9.9.9", 443], ["10.9.9.8", 443]]);
    for (const p of opened) expect(Object.values(p.attributes!)).not.toContain("10.9.9.9");
  });

  test("delta points: the first interval starts when counting began, each next one where the previous ended, start always before time", () => {
    const t = new ConnectionTelemetry({ maxSeries: 10, labeler, toEpochNs: (ns) => ns, startEpochNs: 1_000n });
    t.apply(ev({}));
    const first = t.collect(5_000n);
    expect(first.length).toBeGreaterThan(0);
    for (const p of first) expect([p.startTimeUnixNano, p.timeUnixNano]).toEqual([1_000n, 5_000n]);
    t.apply(ev({}));
    for (const p of t.collect(9_000n)) expect([p.startTimeUnixNano, p.timeUnixNano]).toEqual([5_000n, 9_000n]);
    t.apply(ev({}));
    for (const p of t.collect(9_000n)) expect(p.startTimeUnixNano).toBeLessThan(p.timeUnixNano);
  });

  test("per-second budget refuses beyond the cap and counts refusals", () => {
    let now = 0;
    const b = new PerSecondBudget(3, () => now);
    expect([b.take(), b.take(), b.take(), b.take()]).toEqual([true, true, true, false]);
    now = 999;
    expect(b.take()).toBe(false);
    now = 1000;
    expect(b.take()).toBe(true);
    expect(b.refused).toBe(2);
  });
});

describe("own pid", () => {
  test("the outermost NSpid is the pid BPF helpers report", async () => {
    const { parseNsPid, ownKernelPid } = await import("../../../../src/ebpf/self");
    expect(parseNsPid("Name:\tx\nNSpid:\t41234\t7\n")).toBe(41234);
    expect(parseNsPid("Name:\tx\n")).toBeUndefined();
    expect(ownKernelPid(() => "NSpid:\t99\t1\n")).toBe(99);
    expect(ownKernelPid()).toBe(process.pid);
  });
});
