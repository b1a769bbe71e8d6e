/** Schema of `otlp`, `queues` and `backoff`: the OTLP/gRPC export pipeline. Owned by the exporter. */
import { mkdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { Type, type Static } from "@sinclair/typebox";
import type { ConfigProblem } from "../config/problems";
import { Duration, Size, durationMs, sizeBytes } from "../config/units";

export const SIGNALS = ["traces", "metrics", "logs", "profiles"] as const;
export type Signal = (typeof SIGNALS)[number];

export const OtlpSchema = Type.Object(
  {
    endpoint: Type.String({ default: "127.0.0.1:4317", minLength: 1, description: "Backend address host:port (OTLP/gRPC)." }),
    insecure: Type.Boolean({ default: true, description: "Plaintext gRPC; false uses TLS." }),
    compression: Type.Union([Type.Literal("gzip"), Type.Literal("none")], { default: "gzip", description: "gzip or none." }),
    compression_level: Type.Integer({
      minimum: 1,
      maximum: 9,
      default: 1,
      description: "gzip level, 1 (fastest) to 9 (smallest); 1 costs about a quarter of the CPU time of zlib's default 6 for about 11% more bytes.",
    }),
    headers: Type.Record(Type.String(), Type.String(), {
      default: {},
      description: "gRPC metadata sent with every export (for example an API key); values are redacted in /config.",
    }),
    timeout: Duration("10s", "Deadline of one export request."),
    tls: Type.Object(
      {
        ca_file: Type.String({ default: "", description: "PEM file of the CA that signs the backend's certificate (system roots when empty)." }),
        cert_file: Type.String({ default: "", description: "PEM client certificate for mutual TLS." }),
        key_file: Type.String({ default: "", description: "PEM client key for mutual TLS." }),
        server_name: Type.String({ default: "", description: "Name to verify in the backend's certificate (defaults to the endpoint host)." }),
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false, default: {} },
);
export type OtlpConfig = Static<typeof OtlpSchema>;

const queue = (capacity: number, batch: number) =>
  Type.Object(
    {
      capacity: Type.Integer({ minimum: 1, default: capacity, description: "Maximum items queued." }),
      mem_limit: Size("64MiB", "Maximum bytes of encoded items queued."),
      batch_size: Type.Integer({ minimum: 1, default: batch, description: "Items per export request." }),
      batch_timeout: Duration("200ms", "Longest wait before a partial batch is sent."),
      max_in_flight: Type.Integer({
        minimum: 1,
        maximum: 64,
        default: 4,
        description: "Export requests of this signal outstanding at once: more hide a longer round trip to the backend (batches may then be acknowledged out of order).",
      }),
      persistent: Type.Boolean({
        default: false,
        description: "Keep the queue in an append-only log under storage.directory too: accepted items survive a crash and a restart (read at start).",
      }),
    },
    { additionalProperties: false, default: {} },
  );

export const QueuesSchema = Type.Object(
  {
    traces: queue(20_000, 512),
    metrics: queue(20_000, 512),
    logs: queue(20_000, 512),
    profiles: queue(1_000, 16),
  },
  { additionalProperties: false, default: {} },
);
export type QueuesConfig = Static<typeof QueuesSchema>;

export const BackoffSchema = Type.Object(
  {
    initial: Duration("1s", "First retry delay."),
    max: Duration("30s", "Largest retry delay."),
  },
  { additionalProperties: false, default: {} },
);
export type BackoffConfig = Static<typeof BackoffSchema>;

export const StorageSchema = Type.Object(
  {
    directory: Type.String({
      default: "/var/lib/svc-agent",
      minLength: 1,
      description: "Directory of the persistent queues (queues.<signal>.persistent); must be writable when one is on.",
    }),
    fsync_interval: Duration("1s", "How often persistent queue files are synced to disk (0s: after every item). Writes reach the page cache at once (they survive a crash of the agent)."),
  },
  { additionalProperties: false, default: {} },
);
export type StorageConfig = Static<typeof StorageSchema>;

/** Where the persistent queue of `signal` keeps its files. */
export function queueDirectory(storage: StorageConfig, signal: Signal): string {
  return `${storage.directory.replace(/\/+$/, "")}/queue/${signal}`;
}

/** Cross-field rules of `storage`: a persistent queue needs a directory the agent can create and write. */
export function validateStorage(storage: StorageConfig, queues: QueuesConfig): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const persistent = SIGNALS.filter((s) => queues[s].persistent);
  if (persistent.length === 0) return problems;
  try {
    mkdirSync(storage.directory, { recursive: true, mode: 0o700 });
    if (!statSync(storage.directory).isDirectory()) throw new Error("not a directory");
    // A real write (root passes access(2) checks even on a read-only mount).
    const probe = `${storage.directory.replace(/\/+$/, "")}/.svc-agent-write-probe-${process.pid}`;
    writeFileSync(probe, "");
    rmSync(probe, { force: true });
  } catch (e) {
    problems.push({
      path: "storage.directory",
      message: `must be a writable directory when queues.${persistent[0]}.persistent is true: ${(e as Error).message}`,
    });
  }
  return problems;
}


/** Cross-field rules of the export sections. */
export function validateExport(otlp: OtlpConfig, queues: QueuesConfig, backoff: BackoffConfig): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  if (!/^(\[[0-9a-fA-F:.]+\]|[^:\s/]+):\d{1,5}$/.test(otlp.endpoint))
    problems.push({ path: "otlp.endpoint", message: `expected host:port, got ${JSON.stringify(otlp.endpoint)}` });
  if (durationMs(otlp.timeout) <= 0) problems.push({ path: "otlp.timeout", message: "must be greater than 0" });
  if ((otlp.tls.cert_file === "") !== (otlp.tls.key_file === ""))
    problems.push({ path: "otlp.tls.key_file", message: "cert_file and key_file must be given together" });
  if (otlp.insecure && (otlp.tls.ca_file || otlp.tls.cert_file || otlp.tls.server_name))
    problems.push({ path: "otlp.insecure", message: "is true but otlp.tls settings are given; set insecure: false to use TLS" });
  for (const s of SIGNALS) {
    const q = queues[s];
    if (q.batch_size > q.capacity)
      problems.push({ path: `queues.${s}.batch_size`, message: `(${q.batch_size}) must not exceed queues.${s}.capacity (${q.capacity})` });
    if (sizeBytes(q.mem_limit) <= 0) problems.push({ path: `queues.${s}.mem_limit`, message: "must be greater than 0" });
  }
  if (durationMs(backoff.initial) <= 0) problems.push({ path: "backoff.initial", message: "must be greater than 0" });
  if (durationMs(backoff.initial) > durationMs(backoff.max))
    problems.push({ path: "backoff.max", message: `(${backoff.max}) must not be less than backoff.initial (${backoff.initial})` });
  return problems;
}
