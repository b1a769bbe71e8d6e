/**
 * The official OTLP receiver: an OTLP/gRPC server and checker written with Debian's python3-grpcio and
 * python3-protobuf, its code generated at start by protoc (and grpc_python_plugin, protobuf-compiler-grpc)
 * from the opentelemetry-proto release in proto/ (or another release folder). Nothing of the project decodes:
 * what it reports is what any OTLP implementation built from that release would see.
 *
 * Usage (any test that sends OTLP over gRPC):
 *
 *   const rx = await startOfficialReceiver();
 *   // point the agent at rx.endpoint (127.0.0.1:port, plaintext; gzip is accepted)
 *   const reqs = await rx.waitFor((all) => all.some((r) => r.signal === "traces"));
 *   expect(reqs.flatMap((r) => r.unknown_fields)).toEqual([]);
 *   expect(reqs.flatMap((r) => r.index_errors)).toEqual([]);
 *   reqs[0].message.resourceSpans[0]...   // MessageToDict: camelCase, 64-bit integers as strings, bytes base64
 *   await rx.stop();
 *
 * With `{ http: true }` it also serves OTLP/HTTP (binary protobuf, gzip accepted) at `rx.httpEndpoint`
 * (`http://127.0.0.1:port`, paths /v1/traces, /v1/metrics, /v1/logs, /v1development/profiles); each report
 * says its `transport` and carries the request's headers (or gRPC metadata) in `metadata`.
 * A body received another way (a file, another server) is checked the same way with
 * `checkOfficial(signal, body)`. `missingOfficialTools()` names what is not installed (tests skip with it).
 */
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Subprocess } from "bun";
import { QUIET_CONFIG } from "../quiet-config";

export type OtlpSignal = "traces" | "metrics" | "logs" | "profiles";

/** One request as the receiver reported it (see receiver.py). */
export interface OfficialRequest {
  signal: OtlpSignal;
  /** Paths of fields the schema does not know, in any message of the request. */
  unknown_fields: string[];
  /** Profiles: every index outside its dictionary table. */
  index_errors: string[];
  /** Profiles: tables whose entry 0 is missing or not the zero value; samples of no or mismatched values. */
  table_errors: string[];
  /** The request, as protobuf's json_format.MessageToDict gives it. */
  // biome-ignore lint/suspicious/noExplicitAny: a decoded document of whatever the test expects
  message: any;
  /** Received by the server (not by checkOfficial): "grpc" or "http". */
  transport?: "grpc" | "http";
  /** Received by the server: the request's gRPC metadata (text keys) or HTTP headers, keys lowercase. */
  metadata?: Record<string, string>;
}

export const SCRIPT = resolve(import.meta.dir, "receiver.py");
/** The vendored release (proto/opentelemetry is opentelemetry-proto v1.11.0 unmodified). */
export const PROTO_ROOT = resolve(import.meta.dir, "../../../proto");
/** Debian's interpreter: its python3-grpcio and python3-protobuf (a python3 earlier on PATH may lack them). */
const PYTHON = "/usr/bin/python3";

/** What is missing to run the receiver (empty when it can run). */
export function missingOfficialTools(): string[] {
  const missing: string[] = [];
  if (!Bun.which("protoc")) missing.push("protoc (protobuf-compiler)");
  if (!existsSync("/usr/bin/grpc_python_plugin")) missing.push("grpc_python_plugin (protobuf-compiler-grpc)");
  const r = existsSync(PYTHON) ? Bun.spawnSync([PYTHON, "-c", "import grpc, google.protobuf"], { stderr: "pipe" }) : undefined;
  if (!r || r.exitCode !== 0) missing.push("python3-grpcio and python3-protobuf");
  return missing;
}

export interface OfficialReceiver {
  /** host:port to export to (plaintext gRPC). */
  endpoint: string;
  port: number;
  /** With `http: true`: http://127.0.0.1:port of the OTLP/HTTP server. */
  httpEndpoint?: string;
  /** Every request received so far, in arrival order. */
  requests(): OfficialRequest[];
  /** Resolves with requests() once `pred` holds for them; rejects after `timeoutMs`. */
  waitFor(pred: (requests: OfficialRequest[]) => boolean, timeoutMs?: number): Promise<OfficialRequest[]>;
  stop(): Promise<void>;
}

export interface OfficialReceiverOptions {
  /** A folder holding an opentelemetry-proto release (`opentelemetry/proto/...`); default: the vendored one. */
  protoRoot?: string;
  /** Also serve OTLP/HTTP (binary protobuf) on a port of its own. */
  http?: boolean;
  /** The gRPC server's loopback port (default: any free one). */
  port?: number;
}

export async function startOfficialReceiver(options: OfficialReceiverOptions = {}): Promise<OfficialReceiver> {
  const out = mkdtempSync(join(tmpdir(), "svc-official-rx-"));
  const proc: Subprocess<"ignore", "pipe", "pipe"> = Bun.spawn([PYTHON, SCRIPT, "serve", "--proto-root", options.protoRoot ?? PROTO_ROOT, "--out", out, "--listen", `127.0.0.1:${options.port ?? 0}`, ...(options.http ? ["--http-listen", "127.0.0.1:0"] : [])], {
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  let stderr = "";
  void (async () => {
    for await (const chunk of proc.stderr) stderr += new TextDecoder().decode(chunk);
  })();
  const reader = proc.stdout.getReader();
  let text = "";
  const deadline = performance.now() + 30_000;
  while (!text.includes("\n")) {
    const timeout = new Promise<{ done: true; value: undefined }>((r) => setTimeout(() => r({ done: true, value: undefined }), Math.max(0, deadline - performance.now())));
    const { value, done } = await Promise.race([reader.read(), timeout]);
    if (done) {
      proc.kill();
      throw new Error(`official receiver did not start: ${stderr.trim() || "no output"}`);
    }
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  const { port, http_port: httpPort } = JSON.parse(text.split("\n")[0]!) as { port: number; http_port?: number };

  const seen = new Map<string, OfficialRequest>();
  const requests = (): OfficialRequest[] => {
    for (const f of readdirSync(out).sort()) {
      if (f.startsWith(".") || seen.has(f)) continue;
      seen.set(f, JSON.parse(readFileSync(join(out, f), "utf8")) as OfficialRequest);
    }
    return [...seen.keys()].sort().map((k) => seen.get(k)!);
  };
  return {
    endpoint: `127.0.0.1:${port}`,
    port,
    httpEndpoint: httpPort ? `http://127.0.0.1:${httpPort}` : undefined,
    requests,
    async waitFor(pred, timeoutMs = 20_000) {
      const end = performance.now() + timeoutMs;
      for (;;) {
        const all = requests();
        if (pred(all)) return all;
        if (proc.exitCode !== null) throw new Error(`official receiver exited (${proc.exitCode}): ${stderr.trim()}`);
        if (performance.now() > end) throw new Error(`official receiver: condition not met in ${timeoutMs} ms (${all.length} requests: ${all.map((r) => r.signal).join(", ")})`);
        await Bun.sleep(100);
      }
    },
    async stop() {
      proc.kill("SIGTERM");
      await proc.exited;
      rmSync(out, { recursive: true, force: true });
    },
  };
}

/** Checks one uncompressed Export<Signal>ServiceRequest body with the same generated code (throws when it does not parse). */
export function checkOfficial(signal: OtlpSignal, body: Uint8Array, protoRoot = PROTO_ROOT): OfficialRequest {
  const r = Bun.spawnSync([PYTHON, SCRIPT, "check", "--proto-root", protoRoot, "--signal", signal], { stdin: body, stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`official check of ${signal} failed: ${r.stderr.toString().trim()}`);
  return JSON.parse(r.stdout.toString()) as OfficialRequest;
}

/** A KeyValue list as MessageToDict gives it, as plain values (64-bit integers come as strings and become numbers). */
export function attributesOf(list: unknown): Record<string, string | number | boolean> {
  const value = (v: Record<string, unknown>): string | number | boolean => {
    if ("stringValue" in v) return v.stringValue as string;
    if ("intValue" in v) return Number(v.intValue);
    if ("doubleValue" in v) return Number(v.doubleValue);
    if ("boolValue" in v) return Boolean(v.boolValue);
    return JSON.stringify(v);
  };
  return Object.fromEntries(((list as Array<{ key: string; value: Record<string, unknown> }>) ?? []).map((a) => [a.key, value(a.value)]));
}

/** The requests of one signal. */
export function ofSignal(reqs: OfficialRequest[], signal: OtlpSignal): OfficialRequest[] {
  return reqs.filter((r) => r.signal === signal);
}

/**
 * The agent of the official-schema tests: QUIET_CONFIG with every request self-traced and gzip export (`otlpKeys`:
 * more keys of `otlp`, indented under it), and `agentBlocks` (indented under `agent:`) in place of its eBPF block.
 */
export function officialAgentConfig(agentBlocks: string, otlpKeys = ""): string {
  return QUIET_CONFIG.replace("self_telemetry:\n", "self_telemetry:\n  tracing:\n    enabled: true\n    sample_rate: 1.0\n")
    .replace("otlp:\n", `otlp:\n  compression: gzip\n${otlpKeys}`)
    .replace("  ebpf:\n    enabled: false\n", agentBlocks);
}

/**
 * `agent.gpu` (the NVML stand-in test/fixtures/nvml-stub.c, compiled into `dir`, read every `interval`) and
 * `agent.logs` (the raw lines of `dir`/*.log, `dir`/app.log created empty), indented under `agent:`.
 */
export function gpuAndLogsBlocks(dir: string, interval: string): string {
  const nvml = join(dir, "libnvml.so");
  const cc = Bun.spawnSync(["gcc", "-shared", "-fPIC", "-O1", "-o", nvml, join(import.meta.dir, "../../fixtures/nvml-stub.c")]);
  if (cc.exitCode !== 0) throw new Error(`gcc failed: ${cc.stderr.toString()}`);
  writeFileSync(join(dir, "app.log"), "");
  return `  gpu:
    enabled: true
    interval: ${interval}
    library: ${nvml}
  logs:
    enabled: true
    include: ["${join(dir, "*.log")}"]
    format: raw
    checkpoint_file: ${join(dir, "checkpoint.json")}
    poll_interval: 50ms
`;
}
