import { describe, expect, jest, test } from "bun:test";
import { CLOSE_GRACE_MS, NetworkCollector } from "../../../../src/collectors/network/component";
import { decodeTlsEvent } from "../../../../src/collectors/tls/decoder";
import { fakeContext, recordingHost } from "../../../helpers/fakes/collectors";
import { advanceTimersByTime } from "../../../helpers/fake-timers";
import { tlsRecord } from "./records";

const YAML = `
agent:
  ebpf:
    enabled: false
`;
/** With eBPF and the network set on (over the fake core): the component's periodic work runs. */
const ENABLED_YAML = `
agent:
  ebpf:
    enabled: true
    network:
      enabled: true
`;
const lo = [127, 0, 0, 1];
const tls = (ssl: bigint, pid: number, io: number, off: number, data: string, ts: bigint) => {
  const v = tlsRecord({ ts, ssl, off, sk: 9n, pid, io, sport: 8443, dport: 50000, saddr: lo, daddr: lo, comm: "python3", data });
  return decodeTlsEvent(v, 0, v.byteLength);
};

describe("TLS plaintext through the HTTP exchange tracker of ebpf/network", () => {
  test("a request read and its response written on one SSL object become a SERVER span with url.scheme https", async () => {
    const ctx = fakeContext(YAML);
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    const req = "GET /secure?q=1 HTTP/1.1\r\nHost: api.local:8443\r\n\r\n";
    const res = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
    // Two SSL objects of one process interleave: each keeps its own stream.
    c.handleTls(tls(0xa0n, 42, 0, 0, req, 1_000n));
    c.handleTls(tls(0xb0n, 42, 0, 0, "POST /other HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 1_500n));
    c.handleTls(tls(0xa0n, 42, 1, 0, res, 4_000n));
    c.handleTls(tls(0xb0n, 42, 1, 0, "HTTP/1.1 204 No Content\r\n\r\n", 6_000n));
    c.handleTls(tls(0xa0n, 999, 0, 0, req, 1_000n));
    c.handleTls(tls(0xa0n, 999, 1, 0, res, 4_000n));
    await Promise.resolve();
    const spans = ctx.pipeline.accepted.traces;
    expect(spans.map((s) => [s.attributes?.["http.request.method"], s.attributes?.["url.path"], s.attributes?.["http.response.status_code"]])).toEqual([
      ["GET", "/secure", 200],
      ["POST", "/other", 204],
    ]);
    expect(spans[0]!.attributes).toMatchObject({ "url.scheme": "https", "server.address": "api.local", "server.port": 8443, "client.port": 50000, "process.pid": 42 });
    expect(spans[0]!.endTimeUnixNano - spans[0]!.startTimeUnixNano).toBe(3_000n);
  });

  test("an HTTP/2 connection over TLS the kernel stopped forwarding (its call limit) counts its two directions as rate_limit drops", async () => {
    const ctx = fakeContext(YAML);
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    const opening = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\u0000\u0000\u0000\u0004\u0000\u0000\u0000\u0000\u0000";
    c.handleTls(tls(0xa0n, 42, 0, 0, opening, 1_000n));
    const v = tlsRecord({ ts: 2_000n, ssl: 0xa0n, off: opening.length, sk: 9n, pid: 42, len: 300, io: 0, sport: 8443, dport: 50000, saddr: lo, daddr: lo, comm: "nghttpd", h2Stopped: true, data: "" });
    c.handleTls(decodeTlsEvent(v, 0, v.byteLength));
    await c.shutdown(AbortSignal.timeout(1000));
    const text = await ctx.metrics.registry.metrics();
    expect(text).toMatch(/svc_spans_dropped_total\{reason="rate_limit"\} 2/);
    expect(text).toMatch(/svc_spans_dropped_total\{reason="http2_state_lost"\} 0/);
  });

  test("a process's exit closes its TLS connections CLOSE_GRACE_MS later: records read after the exit still pair, not later ones", async () => {
    jest.useFakeTimers();
    try {
      const ctx = fakeContext(ENABLED_YAML);
      const c = new NetworkCollector(ctx, ctx.ebpf, 999);
      await c.start(recordingHost());
      // The exit is seen before the last plaintext records (another ring buffer): they still make the exchange.
      c.handleTls(tls(0xa0n, 42, 0, 0, "GET /a HTTP/1.1\r\n\r\n", 1_000n));
      // Its records all precede the exit (3,500 ns); some are read after it.
      c.tlsProcessExited(42, 3_500n, () => true);
      c.handleTls(tls(0xa0n, 42, 1, 0, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 2_000n));
      // A request left unanswered: once the grace has passed its connection is closed and a late response pairs nothing.
      c.handleTls(tls(0xb0n, 42, 0, 0, "GET /b HTTP/1.1\r\n\r\n", 3_000n));
      advanceTimersByTime(CLOSE_GRACE_MS + 2_000);
      c.handleTls(tls(0xb0n, 42, 1, 0, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 4_000n));
      await Promise.resolve();
      expect(ctx.pipeline.accepted.traces.map((s) => s.attributes?.["url.path"])).toEqual(["/a"]);
      await c.shutdown(AbortSignal.timeout(1000));
    } finally {
      jest.useRealTimers();
    }
  });

  test("while the TLS ring still holds records, an exit waits past its grace for a record written after it", async () => {
    jest.useFakeTimers();
    try {
      const ctx = fakeContext(ENABLED_YAML);
      const c = new NetworkCollector(ctx, ctx.ebpf, 999);
      await c.start(recordingHost());
      let caughtUp = false;
      c.handleTls(tls(0xa0n, 42, 0, 0, "GET /late HTTP/1.1\r\n\r\n", 1_000n));
      c.tlsProcessExited(42, 5_000n, () => caughtUp);
      // The decoder is behind: long past the grace, the response written before the exit still pairs.
      advanceTimersByTime(CLOSE_GRACE_MS * 5);
      c.handleTls(tls(0xa0n, 42, 1, 0, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 4_000n));
      // A request before the exit, then another process's record written after it: the exit applies at the next poll.
      c.handleTls(tls(0xb0n, 42, 0, 0, "GET /never HTTP/1.1\r\n\r\n", 4_500n));
      c.handleTls(tls(0xc0n, 43, 0, 0, "GET /other HTTP/1.1\r\n\r\n", 6_000n));
      advanceTimersByTime(CLOSE_GRACE_MS);
      c.handleTls(tls(0xb0n, 42, 1, 0, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 7_000n));
      await Promise.resolve();
      expect(ctx.pipeline.accepted.traces.map((s) => s.attributes?.["url.path"])).toEqual(["/late"]);
      caughtUp = true;
      await c.shutdown(AbortSignal.timeout(1000));
    } finally {
      jest.useRealTimers();
    }
  });
});
