/**
 * Shared by the privileged network/syscall tests: an in-process agent with real eBPF exporting to an
 * in-process OTLP receiver (src/export/receiver), and helpers to find decoded spans and metric points.
 */
import { expect } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { OtlpReceiver, decodeRequest } from "../../../../src/export/receiver";
import { inProcessAgent, type InProcessAgent } from "../../../helpers/in-process";
import { startPortServer } from "../../../helpers/ports";
import { parseProtocText, type ProtocNode } from "../../../helpers/protoc";
import { quietConfig } from "../../../helpers/quiet-config";
import { firstLine } from "../../../helpers/wait";

type Json = Record<string, unknown>;

export interface DecodedSpan {
  name: string;
  kind: string;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, string | number | boolean>;
  status: Json | undefined;
  resource: Record<string, string | number | boolean>;
}

export interface DecodedPoint {
  metric: string;
  kind: "sum" | "histogram" | "gauge";
  value: number;
  count: number;
  /** A histogram point's sum of the values (0 for sums). */
  sum: number;
  /** timeUnixNano of the point (one export interval). */
  time: string;
  attributes: Record<string, string | number | boolean>;
}

function attrs(list: unknown): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const a of (list as Array<{ key: string; value: Json }>) ?? []) {
    const v = a.value;
    if ("stringValue" in v) out[a.key] = v.stringValue as string;
    else if ("intValue" in v) out[a.key] = Number(v.intValue);
    else if ("doubleValue" in v) out[a.key] = Number(v.doubleValue);
    else if ("boolValue" in v) out[a.key] = Boolean(v.boolValue);
  }
  return out;
}

export class Collected {
  readonly spans: DecodedSpan[] = [];
  readonly points: DecodedPoint[] = [];
  /** The ExportTraceServiceRequest bodies as they arrived. */
  readonly traceBodies: Uint8Array[] = [];
  /** The ExportMetricsServiceRequest bodies as they arrived. */
  readonly metricBodies: Uint8Array[] = [];

  add(signal: string, body: Uint8Array): void {
    if (signal === "traces") {
      this.traceBodies.push(body);
      const req = decodeRequest("traces", body) as { resourceSpans?: Json[] };
      for (const rs of req.resourceSpans ?? []) {
        const resource = attrs((rs.resource as Json | undefined)?.attributes);
        for (const ss of (rs.scopeSpans as Json[]) ?? []) {
          for (const s of (ss.spans as Json[]) ?? []) {
            this.spans.push({
              name: s.name as string,
              kind: String(s.kind),
              startNs: BigInt(s.startTimeUnixNano as string),
              endNs: BigInt(s.endTimeUnixNano as string),
              attributes: attrs(s.attributes),
              status: s.status as Json | undefined,
              resource,
            });
          }
        }
      }
    } else if (signal === "metrics") {
      this.metricBodies.push(body);
      const req = decodeRequest("metrics", body) as { resourceMetrics?: Json[] };
      for (const rm of req.resourceMetrics ?? []) {
        for (const sm of (rm.scopeMetrics as Json[]) ?? []) {
          for (const m of (sm.metrics as Json[]) ?? []) {
            const name = m.name as string;
            const sum = m.sum as Json | undefined;
            const hist = m.histogram as Json | undefined;
            for (const p of ((sum ?? hist)?.dataPoints as Json[]) ?? []) {
              this.points.push({
                metric: name,
                kind: sum ? "sum" : "histogram",
                value: Number(p.asInt ?? p.asDouble ?? 0),
                count: Number(p.count ?? 0),
                sum: hist ? Number(p.sum ?? 0) : 0,
                time: String(p.timeUnixNano),
                attributes: attrs(p.attributes),
              });
            }
          }
        }
      }
    }
  }

  /** Sum of the values (sums) or counts (histograms) of `metric` over points matching `where`. */
  total(metric: string, where: (a: Record<string, string | number | boolean>) => boolean): number {
    return totalOf(this.points, metric, where);
  }
}

/** Sum of the values (sums) or counts (histograms) of `metric` over `points` matching `where`. */
export function totalOf(points: DecodedPoint[], metric: string, where: (a: Record<string, string | number | boolean>) => boolean): number {
  return points.filter((p) => p.metric === metric && where(p.attributes)).reduce((s, p) => s + (p.kind === "histogram" ? p.count : p.value), 0);
}

/**
 * The quiet configuration with eBPF on (`ebpfYaml`: lines under agent.ebpf), exporting to 127.0.0.1:`port` in
 * batches of 50ms; `dockerYaml`: lines under agent.discovery.docker (docker discovery is off by default).
 */
export function agentYaml(port: number, ebpfYaml: string, dockerYaml?: string): string {
  return quietConfig({
    endpoint: `127.0.0.1:${port}`,
    extra: "queues:\n  traces:\n    batch_timeout: 50ms\n  metrics:\n    batch_timeout: 50ms",
    ebpf: `    enabled: true\n${ebpfYaml}`,
    docker: dockerYaml,
  });
}

export interface TracingAgent {
  agent: InProcessAgent;
  receiver: OtlpReceiver;
  collected: Collected;
  /** The receiver's loopback port (the agent's exports go to 127.0.0.1 at it). */
  port: number;
  stop(): Promise<void>;
  /** Rewrites the configuration with another agent.ebpf section and reloads; resolves with the reload outcome. */
  reconfigure(ebpfYaml: string): Promise<unknown>;
}

/** A peer fixture process started by startPeerFixture. */
export interface PeerFixture {
  /** The port it printed on its first line. */
  port: number;
  /** Sends the line on stdin it waits for before it works (and closes its stdin). */
  go(): void;
  /** Its next line of output (throws when it ended first). */
  next(): Promise<string>;
  /** The rest of its output, once it ended. */
  rest(): Promise<string>;
  exited: Promise<number>;
}

/**
 * Starts `command`, a peer fixture (test/fixtures/*-http.py) that prints its port, waits for a line on stdin, then
 * does its work and prints what it says of it.
 */
export async function startPeerFixture(command: string[]): Promise<PeerFixture> {
  const p = Bun.spawn(command, { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  const reader = p.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  let ended = false;
  const fill = async () => {
    const r = await reader.read();
    if (r.done) ended = true;
    else buffered += r.value;
  };
  const next = async (): Promise<string> => {
    while (!buffered.includes("\n")) {
      if (ended) throw new Error(`${command.join(" ")} ended after ${JSON.stringify(buffered)}`);
      await fill();
    }
    const at = buffered.indexOf("\n");
    const line = buffered.slice(0, at);
    buffered = buffered.slice(at + 1);
    return line;
  };
  const port = Number(await next());
  return {
    port,
    go: () => {
      p.stdin.write("\n");
      p.stdin.end();
    },
    next,
    rest: async () => {
      while (!ended) await fill();
      const all = buffered;
      buffered = "";
      return all;
    },
    exited: p.exited,
  };
}

/** Starts a receiver and an agent with eBPF on, exporting to it; `extra` is YAML under agent.ebpf. */
export async function startTracingAgent(ebpfYaml: string, dockerYaml?: string): Promise<TracingAgent> {
  const collected = new Collected();
  const receiver = new OtlpReceiver({ listen: "127.0.0.1:0", onRequest: (r) => collected.add(r.signal, r.body) });
  const port = await receiver.start();
  const yaml = agentYaml(port, ebpfYaml, dockerYaml);
  const agent = await inProcessAgent(yaml);
  return {
    agent,
    receiver,
    collected,
    port,
    async reconfigure(ebpfYaml: string) {
      agent.writeConfig(agentYaml(port, ebpfYaml, dockerYaml));
      return agent.agent.reload("test");
    },
    async stop() {
      await agent.agent.shutdown();
      await receiver.stop();
    },
  };
}

/**
 * startTracingAgent with network tracing in capture mode `mode`, connection metrics hourly and room for 50,000
 * spans a second (the kernel's exchange budget is taken by every process on the machine: room for a test's
 * exchanges too); resolves once ebpf/network is ok.
 */
export async function startCaptureAgent(mode: "socket" | "syscalls"): Promise<TracingAgent> {
  const t = await startTracingAgent(`    network:
      enabled: true
      http_capture: ${mode}
      metrics_interval: 1h
      max_spans_per_second: 50000`);
  await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
  return t;
}

/**
 * For a connection opened before the agent: starts it now (network tracing in capture mode `mode`, every exchange a
 * span, metrics each second), and once ebpf/network is ok writes "go" to `client` (a long-lived client waiting on
 * its stdin) and resolves with the agent and the first line the client prints back.
 */
export async function startAgentThenGo(mode: "socket" | "syscalls", client: Bun.Subprocess<"pipe", "pipe", "inherit">): Promise<{ t: TracingAgent; line: string }> {
  const t = await startTracingAgent(`    network:
      enabled: true
      http_capture: ${mode}
      max_spans_per_second: 1000000
      metrics_interval: 1s`);
  await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
  client.stdin.write("go\n");
  client.stdin.flush();
  return { t, line: await firstLine(client.stdout) };
}

/**
 * A Node HTTP/2 cleartext server (header lists up to 1 MiB) answering every stream 200 with "hello <path>"; prints
 * its loopback port first (for startPortServer(["node", "-e", NODE_H2_SERVER])).
 */
export const NODE_H2_SERVER = `
const http2 = require("node:http2");
const s = http2.createServer({ maxHeaderListSize: 1 << 20 });
s.on("stream", (stream, headers) => {
  stream.respond({ ":status": 200, "content-type": "text/plain" });
  stream.end("hello " + headers[":path"]);
});
s.listen(0, "127.0.0.1", () => console.log(s.address().port));
`;

/**
 * A Node `http2` client of one connection for its whole life, to the base URL in its argument (https: any
 * certificate): 5 GETs of /early, then "open"; on each "go" line of its stdin, 20 GETs of distinct /late/<n> paths,
 * 10 of /missing and 5 of /early, one at a time, then a line with the count of each status (JSON).
 */
export const LONG_LIVED_H2_CLIENT = `
const http2 = require("node:http2");
const s = http2.connect(process.argv[1], { rejectUnauthorized: false });
const get = (p) => new Promise((res, rej) => {
  const r = s.request({ ":path": p });
  r.on("response", (h) => { const st = h[":status"]; r.resume(); r.on("end", () => res(st)); });
  r.on("error", rej);
  r.end();
});
const lines = require("node:readline").createInterface({ input: process.stdin });
(async () => {
  for (let i = 0; i < 5; i++) await get("/early");
  console.log("open");
  for await (const line of lines) {
    if (line !== "go") continue;
    const counts = {};
    const paths = [];
    for (let i = 0; i < 20; i++) paths.push("/late/" + (1000 + i));
    for (let i = 0; i < 10; i++) paths.push("/missing");
    for (let i = 0; i < 5; i++) paths.push("/early");
    for (const p of paths) { const st = await get(p); counts[st] = (counts[st] || 0) + 1; }
    console.log(JSON.stringify(counts));
  }
  s.close();
})();
`;

/** @grpc/grpc-js and the test.v1.Echo service (test/fixtures/grpc-echo-service.cjs), for node -e run from the repository. */
export const GRPC_ECHO_COMMON = `
const { grpc, service, handlers } = require("./test/fixtures/grpc-echo-service.cjs");
`;

/** An h2c gRPC server of test.v1.Echo on 127.0.0.1 (node -e, from the repository); prints its port. */
export const GRPC_ECHO_SERVER = `${GRPC_ECHO_COMMON}
const server = new grpc.Server();
server.addService(service, handlers);
server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, port) => { if (err) throw err; console.log(port); });
`;

/**
 * A Node `http2` client of one connection to the base URL in its argument (https: any certificate): a GET of /warm,
 * then "open"; on a line of stdin, a first phase (argv[2]: "sequential", forty GETs of /fast/<n> one after another;
 * "burst", 200 concurrent GETs of /burst/<n>), 1.5 s of quiet, then ten GETs of /slow/<n> 500 ms apart; then "done".
 */
export const RESUME_H2_CLIENT = `
const http2 = require("node:http2");
const s = http2.connect(process.argv[1], { rejectUnauthorized: false });
const get = (p) => new Promise((res, rej) => {
  const r = s.request({ ":path": p });
  r.on("response", (h) => { r.resume(); r.on("end", () => res(h[":status"])); });
  r.on("error", rej);
  r.end();
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
(async () => {
  await get("/warm");
  console.log("open");
  process.stdin.once("data", async () => {
    if (process.argv[2] === "burst") await Promise.all(Array.from({ length: 200 }, (_, i) => get("/burst/" + i)));
    else for (let i = 0; i < 40; i++) await get("/fast/" + i);
    await sleep(1500);
    for (let i = 0; i < 10; i++) { await get("/slow/" + i); await sleep(500); }
    console.log("done");
    s.close();
  });
})();
`;

/**
 * Runs RESUME_H2_CLIENT's phases (`client` waiting on its stdin) and checks the second: its ten GETs of /slow/<n>,
 * answered 404 (the only ones), are ten server spans of `serverPid` and ten client spans of the client, with
 * url.scheme `scheme`, and count exactly ten in the RED metrics of each side at `port`; resolves with the agent's
 * svc_ebpf_http2_resumed_total.
 */
export async function expectSecondPhase(t: TracingAgent, client: Bun.Subprocess<"pipe", "pipe", "inherit">, serverPid: number, port: number, scheme: string): Promise<number> {
  client.stdin.write("go\n");
  client.stdin.flush();
  expect(await firstLine(client.stdout)).toBe("done");
  const slowIn = (spans: DecodedSpan[], kind: string, pid: number) =>
    spans
      .filter((s) => s.kind === kind && s.attributes["process.pid"] === pid && String(s.attributes["url.path"]).startsWith("/slow/"))
      .map((s) => `${s.attributes["url.scheme"]} ${s.attributes["url.path"]} ${s.attributes["http.response.status_code"]}`)
      .sort();
  const slow = (kind: string, pid: number) => slowIn(t.collected.spans, kind, pid);
  const countedIn = (points: DecodedPoint[], metric: string) => totalOf(points, metric, (a) => a["server.port"] === port && a["http.response.status_code"] === 404 && a["url.scheme"] === (scheme === "https" ? "https" : undefined));
  const counted = (metric: string) => countedIn(t.collected.points, metric);
  const expected = Array.from({ length: 10 }, (_, i) => `${scheme} /slow/${i} 404`).sort();
  /* Waiting reads the receiver's own decoding; the assertions read protoc's, from the official protos. */
  await until(() => slow("SPAN_KIND_SERVER", serverPid).length >= 10 && slow("SPAN_KIND_CLIENT", client.pid).length >= 10, "ten /slow server and client spans", 20_000);
  await until(() => counted("http.server.request.duration") >= 10 && counted("http.client.request.duration") >= 10, "ten /slow RED counts on each side", 20_000);
  /* A second more: nothing else arrives (each request once). */
  await Bun.sleep(1500);
  const spans = decodeSpansWithProtoc(t.collected.traceBodies);
  const points = decodePointsWithProtoc(t.collected.metricBodies);
  expect(slowIn(spans, "SPAN_KIND_SERVER", serverPid)).toEqual(expected);
  expect(slowIn(spans, "SPAN_KIND_CLIENT", client.pid)).toEqual(expected);
  expect([countedIn(points, "http.server.request.duration"), countedIn(points, "http.client.request.duration")]).toEqual([10, 10]);
  const metrics = (await (await t.agent.request("/metrics")).text()).split("\n");
  return Number(metrics.find((l) => l.startsWith("svc_ebpf_http2_resumed_total "))?.split(" ")[1] ?? 0);
}

/** A Bun.serve HTTP server answering "ok" on a free loopback port, in a child process. */
export async function startLoopbackHttpServer(): Promise<{ base: string; stop(): Promise<void> }> {
  const server = await startPortServer([process.execPath, "-e", `const s = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("ok") }); console.log(s.port);`]);
  return { base: `http://127.0.0.1:${server.port}`, stop: () => server.stop() };
}

/** The agent's `svc_spans_dropped_total{reason}` as its /metrics says now. */
export async function spansDropped(t: TracingAgent, reason: string): Promise<number> {
  const text = await (await t.agent.request("/metrics")).text();
  return Number(text.split("\n").find((l) => l.startsWith(`svc_spans_dropped_total{reason="${reason}"}`))?.split(" ").at(-1) ?? 0);
}

/** Compiles C `source` with gcc into a fresh temporary folder; returns the executable's path. */
export function compileC(name: string, source: string, flags: string[] = []): string {
  const dir = mkdtempSync(join(tmpdir(), `svc-${name}-`));
  writeFileSync(join(dir, `${name}.c`), source);
  const cc = Bun.spawnSync(["gcc", "-O1", ...flags, "-o", join(dir, name), join(dir, `${name}.c`)]);
  if (cc.exitCode !== 0) throw new Error(`gcc failed: ${cc.stderr.toString()}`);
  return join(dir, name);
}

/** Polls `cond` every 20 ms for at most `ms`; throws naming `what`. */
export async function until(cond: () => boolean, what: string, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (cond()) return;
    await Bun.sleep(20);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}

const PROTO_DIR = new URL("../../../../proto", import.meta.url).pathname;

type TextNode = ProtocNode;

const nodes = (n: TextNode, f: string) => (n[f] ?? []) as TextNode[];
const scalar = (n: TextNode, f: string) => n[f]?.[0] as string | undefined;

/** `bodies` decoded by `protoc --decode` (Debian's protobuf-compiler, not the project's decoder) as `message`, in proto/. */
function protocDecode(bodies: Uint8Array[], message: string, file: string): TextNode[] {
  return bodies.map((body) => {
    const r = Bun.spawnSync(["protoc", `-I${PROTO_DIR}`, `--decode=${message}`, file], { stdin: body, stdout: "pipe", stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`protoc --decode failed: ${r.stderr.toString()}`);
    return parseProtocText(r.stdout.toString());
  });
}

/** The attributes of a decoded message (its `attributes` key-value list). */
function protocAttributes(n: TextNode): Record<string, string | number | boolean> {
  const a: Record<string, string | number | boolean> = {};
  for (const x of nodes(n, "attributes")) {
    const v = nodes(x, "value")[0] ?? {};
    const key = scalar(x, "key")!;
    if (v.string_value) a[key] = scalar(v, "string_value")!;
    else if (v.int_value) a[key] = Number(scalar(v, "int_value"));
    else if (v.bool_value) a[key] = scalar(v, "bool_value") === "true";
    else if (v.double_value) a[key] = Number(scalar(v, "double_value"));
  }
  return a;
}

/**
 * The sum and histogram points of the received metric requests as decoded by `protoc --decode` against the OTLP
 * definitions in proto/ (what Collected.points holds from the project's decoder).
 */
export function decodePointsWithProtoc(bodies: Uint8Array[]): DecodedPoint[] {
  const out: DecodedPoint[] = [];
  for (const req of protocDecode(bodies, "opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest", "opentelemetry/proto/collector/metrics/v1/metrics_service.proto")) {
    for (const rm of nodes(req, "resource_metrics")) {
      for (const sm of nodes(rm, "scope_metrics")) {
        for (const m of nodes(sm, "metrics")) {
          const sum = nodes(m, "sum")[0];
          const hist = nodes(m, "histogram")[0];
          for (const p of nodes(sum ?? hist ?? {}, "data_points")) {
            out.push({
              metric: scalar(m, "name")!,
              kind: sum ? "sum" : "histogram",
              value: Number(scalar(p, "as_int") ?? scalar(p, "as_double") ?? 0),
              count: Number(scalar(p, "count") ?? 0),
              sum: hist ? Number(scalar(p, "sum") ?? 0) : 0,
              time: scalar(p, "time_unix_nano") ?? "0",
              attributes: protocAttributes(p),
            });
          }
        }
      }
    }
  }
  return out;
}

/**
 * The spans of the received trace requests as decoded by `protoc --decode` (Debian's protobuf-compiler, not the
 * project's decoder) against the OTLP definitions in proto/.
 */
export function decodeSpansWithProtoc(bodies: Uint8Array[]): DecodedSpan[] {
  const out: DecodedSpan[] = [];
  for (const req of protocDecode(bodies, "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest", "opentelemetry/proto/collector/trace/v1/trace_service.proto")) {
    for (const rs of nodes(req, "resource_spans")) {
      const resource = protocAttributes(nodes(rs, "resource")[0] ?? {});
      for (const ss of nodes(rs, "scope_spans")) {
        for (const s of nodes(ss, "spans")) {
          out.push({
            name: scalar(s, "name")!,
            kind: scalar(s, "kind") ?? "SPAN_KIND_UNSPECIFIED",
            startNs: BigInt(scalar(s, "start_time_unix_nano")!),
            endNs: BigInt(scalar(s, "end_time_unix_nano")!),
            attributes: protocAttributes(s),
            status: nodes(s, "status")[0] as Json | undefined,
            resource,
          });
        }
      }
    }
  }
  return out;
}
