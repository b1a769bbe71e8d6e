/**
 * gzip at otlp.compression_level: what the transport puts on the wire, seen by a plain HTTP/2 server on port 0
 * (grpc-js's server would decompress before anyone could look): the gRPC frame's compressed flag, the
 * `grpc-encoding` header, and the compressed bytes: they decompress to the request, and the gzip header's XFL
 * byte, which zlib sets from the level (4: fastest, level 1; 2: best, level 9), says which level made them.
 * OTLP/HTTP the same way, seen by a plain Bun.serve: `Content-Encoding: gzip` and the body's gzip header.
 */
import { afterEach, expect, test } from "bun:test";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { gunzipSync, gzipSync } from "node:zlib";
import { ResourceBuilder } from "../../../src/export/resource";
import { ItemEncoder, buildRequest } from "../../../src/export/encode";
import { frameMessage } from "../../../src/export/gzip-filter";
import { GrpcTransport } from "../../../src/export/transport-grpc";
import { transportFor } from "../../../src/export/transport-select";
import { spans, testConfig } from "./harness";

interface Captured {
  headers: http2.IncomingHttpHeaders;
  frame: Buffer;
}

const closers: Array<() => void> = [];
afterEach(() => {
  for (const c of closers.splice(0).reverse()) c();
});

/** An HTTP/2 server answering every gRPC call with `response` (gzipped when asked) and status OK, advertising `acceptEncoding`. */
async function rawServer(acceptEncoding: string, response: { body: Uint8Array; gzip: boolean } = { body: new Uint8Array(0), gzip: false }): Promise<{ port: number; calls: Captured[] }> {
  const calls: Captured[] = [];
  const server = http2.createServer();
  server.on("stream", (stream: http2.ServerHttp2Stream, headers) => {
    const chunks: Buffer[] = [];
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("end", () => {
      calls.push({ headers, frame: Buffer.concat(chunks) });
      const answer: http2.OutgoingHttpHeaders = { ":status": 200, "content-type": "application/grpc", "grpc-accept-encoding": acceptEncoding };
      if (response.gzip) answer["grpc-encoding"] = "gzip";
      stream.respond(answer, { waitForTrailers: true });
      stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
      stream.end(frameMessage(response.gzip ? gzipSync(response.body) : response.body, response.gzip));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(() => server.close());
  return { port: (server.address() as AddressInfo).port, calls };
}

function transport(port: number, compression: "gzip" | "none", level: number): GrpcTransport {
  const config = testConfig({ otlp: { endpoint: `127.0.0.1:${port}`, compression, compression_level: level } });
  const t = new GrpcTransport({ otlp: config.otlp, reconnectInitialMs: 20, reconnectMaxMs: 100 });
  closers.push(() => t.close());
  return t;
}

function body(): Uint8Array {
  const resource = new ResourceBuilder("compression-test");
  const encoder = new ItemEncoder(resource.encoder);
  return buildRequest("traces", spans(300, { "url.path": "/api/orders", "http.request.method": "GET" }).map((s) => encoder.encode("traces", s)), resource.encoder);
}

/** Offset of XFL in the gzip header (RFC 1952), and its values for levels 1 and 9. */
const GZIP_XFL_OFFSET = 8;
const XFL_BY_LEVEL: Record<number, number> = { 1: 4, 9: 2 };

test("gzip at the configured level: compressed flag, grpc-encoding gzip, bytes made at that level", async () => {
  const server = await rawServer("identity,gzip");
  const request = body();
  const sizes: number[] = [];
  for (const level of [1, 9]) {
    const t = transport(server.port, "gzip", level);
    expect(t.compressionLevel).toBe(level);
    const outcome = await t.send("traces", request, Date.now() + 5000);
    expect(outcome.kind).toBe("success");
    const call = server.calls.at(-1)!;
    expect(call.headers["grpc-encoding"]).toBe("gzip");
    expect(call.frame[0]).toBe(1);
    const payload = call.frame.subarray(5);
    expect(call.frame.readUInt32BE(1)).toBe(payload.length);
    expect(new Uint8Array(gunzipSync(payload))).toEqual(new Uint8Array(request));
    expect(payload[GZIP_XFL_OFFSET]).toBe(XFL_BY_LEVEL[level]!);
    sizes.push(payload.length);
  }
  expect(sizes[1]!).toBeLessThan(sizes[0]!);
});

test("compression none sends the request as is, without grpc-encoding", async () => {
  const server = await rawServer("identity,gzip");
  const request = body();
  const t = transport(server.port, "none", 1);
  expect(t.compressionLevel).toBeUndefined();
  expect((await t.send("traces", request, Date.now() + 5000)).kind).toBe("success");
  const call = server.calls[0]!;
  expect(call.headers["grpc-encoding"]).toBeUndefined();
  expect(call.frame[0]).toBe(0);
  expect(new Uint8Array(call.frame.subarray(5))).toEqual(new Uint8Array(request));
});

test("a server that does not accept gzip gets identity from the next call on", async () => {
  const server = await rawServer("identity");
  const request = body();
  const t = transport(server.port, "gzip", 1);
  expect((await t.send("traces", request, Date.now() + 5000)).kind).toBe("success");
  expect((await t.send("traces", request, Date.now() + 5000)).kind).toBe("success");
  expect(server.calls[0]!.frame[0]).toBe(1);
  expect(server.calls[1]!.headers["grpc-encoding"]).toBeUndefined();
  expect(server.calls[1]!.frame[0]).toBe(0);
  expect(new Uint8Array(server.calls[1]!.frame.subarray(5))).toEqual(new Uint8Array(request));
});

test("a gzip-compressed answer is decompressed: its partial success is read", async () => {
  // ExportTraceServiceResponse { partial_success { rejected_spans: 3, error_message: "x" } }
  const partial = new Uint8Array([0x0a, 0x05, 0x08, 0x03, 0x12, 0x01, 0x78]);
  const server = await rawServer("identity,gzip", { body: partial, gzip: true });
  const t = transport(server.port, "gzip", 1);
  expect(await t.send("traces", body(), Date.now() + 5000)).toEqual({ kind: "success", rejected: 3, message: "x" });
});

/** A plain HTTP server recording each request's headers and body as they came (nothing decompressed). */
function rawHttpServer(answer: { body: Uint8Array; gzip: boolean } = { body: new Uint8Array(0), gzip: false }) {
  const calls: Array<{ path: string; headers: Headers; body: Buffer }> = [];
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      calls.push({ path: new URL(req.url).pathname, headers: req.headers, body: Buffer.from(await req.arrayBuffer()) });
      const headers: Record<string, string> = { "content-type": "application/x-protobuf" };
      if (answer.gzip) headers["content-encoding"] = "gzip";
      return new Response(answer.gzip ? gzipSync(answer.body) : answer.body, { headers });
    },
  });
  closers.push(() => void server.stop(true));
  return { port: server.port!, calls };
}

function httpTransport(port: number, compression: "gzip" | "none", level: number) {
  const t = transportFor(testConfig({ otlp: { protocol: "http/protobuf", endpoint: `127.0.0.1:${port}`, compression, compression_level: level } }));
  closers.push(() => t.close());
  return t;
}

test("OTLP/HTTP: gzip at the configured level (Content-Encoding gzip, bytes made at that level); none sends the request as is", async () => {
  const server = rawHttpServer();
  const request = body();
  const sizes: number[] = [];
  for (const level of [1, 9]) {
    expect((await httpTransport(server.port, "gzip", level).send("traces", request, Date.now() + 5000)).kind).toBe("success");
    const call = server.calls.at(-1)!;
    expect(call.path).toBe("/v1/traces");
    expect(call.headers.get("content-type")).toBe("application/x-protobuf");
    expect(call.headers.get("content-encoding")).toBe("gzip");
    expect(new Uint8Array(gunzipSync(call.body))).toEqual(new Uint8Array(request));
    expect(call.body[GZIP_XFL_OFFSET]).toBe(XFL_BY_LEVEL[level]!);
    sizes.push(call.body.length);
  }
  expect(sizes[1]!).toBeLessThan(sizes[0]!);
  expect((await httpTransport(server.port, "none", 1).send("traces", request, Date.now() + 5000)).kind).toBe("success");
  const plain = server.calls.at(-1)!;
  expect(plain.headers.get("content-encoding")).toBeNull();
  expect(new Uint8Array(plain.body)).toEqual(new Uint8Array(request));
});

test("OTLP/HTTP: a gzip-compressed answer is decompressed: its partial success is read", async () => {
  const partial = new Uint8Array([0x0a, 0x05, 0x08, 0x03, 0x12, 0x01, 0x78]);
  const server = rawHttpServer({ body: partial, gzip: true });
  expect(await httpTransport(server.port, "gzip", 1).send("traces", body(), Date.now() + 5000)).toEqual({ kind: "success", rejected: 3, message: "x" });
});
