import { describe, expect, test } from "bun:test";
import { NetworkCollector } from "../../../../src/collectors/network/component";
import { decodeTlsEvent } from "../../../../src/collectors/tls/decoder";
import { fakeContext } from "../../../helpers/fakes/collectors";
import { tlsRecord } from "./records";

const YAML = `
agent:
  ebpf:
    enabled: false
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

  test("a process's exit forgets its TLS connections (a request without its response is not answered later)", async () => {
    const ctx = fakeContext(YAML);
    const c = new NetworkCollector(ctx, ctx.ebpf, 999);
    c.handleTls(tls(0xa0n, 42, 0, 0, "GET / HTTP/1.1\r\n\r\n", 1_000n));
    c.tlsProcessExited(42);
    c.handleTls(tls(0xa0n, 42, 1, 0, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 2_000n));
    await Promise.resolve();
    expect(ctx.pipeline.accepted.traces).toHaveLength(0);
  });
});
