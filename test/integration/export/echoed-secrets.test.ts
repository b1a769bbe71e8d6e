/**
 * A backend that echoes the credential it refuses ("invalid api key <key>") over OTLP/HTTP (a 401 body) or
 * OTLP/gRPC (grpc-message): the outcome's message, which becomes last_error in /status/export and
 * /admin/flush, carries [REDACTED] in place of the configured header value.
 */
import { afterEach, expect, test } from "bun:test";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { signalTarget } from "../../../src/export/config";
import { GrpcTransport } from "../../../src/export/transport-grpc";
import { HttpTransport } from "../../../src/export/transport-http";
import { testConfig } from "./harness";

const KEY = "key-7f3a9c-echoed";
const closers: Array<() => void> = [];
afterEach(() => {
  for (const c of closers.splice(0).reverse()) c();
});

test("OTLP/HTTP: a 401 body echoing the API key leaves it out of the outcome's message", async () => {
  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (req) => new Response(`invalid api key ${req.headers.get("x-api-key")}`, { status: 401 }) });
  closers.push(() => server.stop(true));
  const c = testConfig({ otlp: { protocol: "http/protobuf", endpoint: `http://127.0.0.1:${server.port}`, headers: { "x-api-key": KEY } } });
  const t = new HttpTransport({ otlp: c.otlp, targets: { traces: signalTarget(c.otlp, "traces") } });
  const o = await t.send("traces", new Uint8Array(0), Date.now() + 5000);
  expect(o.kind).toBe("failure");
  expect(o.message).toContain("invalid api key [REDACTED]");
  expect(o.message).not.toContain(KEY);
});

test("OTLP/gRPC: a grpc-message echoing the API key leaves it out of the outcome's message", async () => {
  const server = http2.createServer();
  server.on("stream", (stream: http2.ServerHttp2Stream, headers) => {
    stream.on("data", () => {});
    stream.on("end", () => {
      stream.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "16", "grpc-message": encodeURIComponent(`invalid api key ${headers["x-api-key"]}`) }, { endStream: true });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(() => server.close());
  const c = testConfig({ otlp: { endpoint: `127.0.0.1:${(server.address() as AddressInfo).port}`, headers: { "x-api-key": KEY } } });
  const t = new GrpcTransport({ otlp: c.otlp, reconnectInitialMs: 20, reconnectMaxMs: 100 });
  closers.push(() => t.close());
  const o = await t.send("traces", new Uint8Array(0), Date.now() + 5000);
  expect(o.kind).toBe("failure");
  expect(o.message).toContain("invalid api key [REDACTED]");
  expect(o.message).not.toContain(KEY);
});
