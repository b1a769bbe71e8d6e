/**
 * Export test harness: an in-process OTLP receiver on port 0 (scripted answers), and the pipeline with its
 * exporter/otlp component wired to a status aggregator, metrics and a logger, as the Agent wires them.
 */
import { expect } from "bun:test";
import type { BaseContext } from "../../../src/lifecycle/context";
import { loadConfig } from "../../../src/config/load";
import type { Config } from "../../../src/config/schema";
import { OtlpExporterComponent, type ExporterOptions } from "../../../src/export/component";
import type { SpanItem } from "../../../src/export/model";
import type { OtlpPipeline } from "../../../src/export/pipeline";
import { OtlpReceiver, type ReceivedRequest, type ReceiverOptions, type ReceiverReply } from "../../../src/export/receiver";
import type { ComponentHost } from "../../../src/lifecycle/component";
import { Logger, type LogRecord } from "../../../src/log/logger";
import { StatusAggregator } from "../../../src/status/aggregator";
import { AgentMetrics } from "../../../src/telemetry/metrics";
import { TaskRegistry } from "../../../src/telemetry/tasks";
import { SIGNALS, type Protocol } from "../../../src/export/config";
import { OtlpHttpBackend, type HttpReply } from "../../helpers/fakes/otlp-http-backend";

/** Both values of otlp.protocol: tests that hold for either run once for each. */
export const PROTOCOLS: readonly Protocol[] = ["grpc", "http/protobuf"];

export { waitUntil } from "../../helpers/wait";

type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? DeepPartial<T[K]> : T[K] };

function merge<T>(base: T, over: DeepPartial<T> | undefined): T {
  if (!over) return base;
  const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [k, v] of Object.entries(over)) {
    const b = out[k];
    out[k] = v && typeof v === "object" && !Array.isArray(v) && b && typeof b === "object" ? merge(b, v as never) : v;
  }
  return out as T;
}

/** The default configuration with fast test timings, then `over`. */
export function testConfig(over?: DeepPartial<Config>): Config {
  const base = loadConfig(undefined, {}).config;
  return merge(
    merge(base, {
      otlp: { timeout: "2s" },
      backoff: { initial: "20ms", max: "100ms" },
      queues: { traces: { batch_timeout: "20ms" }, metrics: { batch_timeout: "20ms" }, logs: { batch_timeout: "20ms" }, profiles: { batch_timeout: "20ms" } },
    } as DeepPartial<Config>),
    over,
  );
}

/**
 * A receiver that records every request and answers with `script` (one reply per request, then `then`): the
 * project's OTLP/gRPC receiver, or with `protocol: "http/protobuf"` the OTLP/HTTP test backend (replies then
 * carry HTTP statuses).
 */
export class TestBackend {
  readonly requests: ReceivedRequest[] = [];
  readonly receiver: OtlpReceiver | OtlpHttpBackend;
  script: Array<ReceiverReply | HttpReply> = [];
  then: ReceiverReply | HttpReply = { ok: true };
  port = 0;

  constructor(options: Partial<ReceiverOptions> & { protocol?: Protocol } = {}) {
    const { protocol = "grpc", ...rest } = options;
    const common = {
      listen: options.listen ?? "127.0.0.1:0",
      onRequest: (r: ReceivedRequest) => {
        if (r.items > 0) this.requests.push(r);
      },
      respond: (r: ReceivedRequest) => (r.items > 0 ? (this.script.shift() ?? this.then) : { ok: true as const }),
    };
    this.receiver =
      protocol === "grpc"
        ? new OtlpReceiver({ ...rest, ...common } as ReceiverOptions)
        : new OtlpHttpBackend({ ...(rest.tls ? { tls: rest.tls } : {}), ...common } as ConstructorParameters<typeof OtlpHttpBackend>[0]);
  }

  async start(): Promise<this> {
    this.port = await this.receiver.start();
    return this;
  }

  get endpoint(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Items received for a signal. */
  items(signal = "traces"): number {
    return this.requests.filter((r) => r.signal === signal).reduce((a, r) => a + r.items, 0);
  }

  stop(): Promise<void> {
    return this.receiver.stop();
  }
}

export interface Harness {
  config: Config;
  pipeline: OtlpPipeline;
  component: OtlpExporterComponent;
  status: StatusAggregator;
  metrics: AgentMetrics;
  logs: LogRecord[];
  /** Starts the component (connects, begins checks). */
  start(): Promise<void>;
  /** Readiness text of the `otlp` check. */
  readiness(): string;
  stop(deadlineMs?: number): Promise<void>;
}

export function harness(config: Config, options: ExporterOptions = {}): Harness {
  let current = config;
  const logs: LogRecord[] = [];
  const logger = new Logger({ sink: (line) => logs.push(JSON.parse(line) as LogRecord), level: "debug" });
  const status = new StatusAggregator();
  const tasks = new TaskRegistry();
  const metrics = new AgentMetrics("svc", tasks);
  const ctx: BaseContext = {
    get config() {
      return current;
    },
    logger,
    status,
    metrics,
    tasks,
    env: {},
  };
  const component = new OtlpExporterComponent(ctx, { random: () => 0.5, ...options });
  const pipeline = component.pipeline;
  const host: ComponentHost = {
    logger,
    report: (state, reason) => status.report(component.id, component.readiness, state, reason),
  };
  status.report(component.id, component.readiness, "starting");
  let stopped = false;
  return {
    config,
    pipeline,
    component,
    status,
    metrics,
    logs,
    start: () => component.start(host),
    readiness: () => status.readiness().checks.otlp,
    async stop(deadlineMs = 2000) {
      if (stopped) return;
      stopped = true;
      await component.shutdown(AbortSignal.timeout(deadlineMs));
    },
  };
}

let nextSpan = 1;

/** `n` distinct spans (span ids count up across the test file). */
export function spans(n: number, attributes: SpanItem["attributes"] = { "http.request.method": "GET" }): SpanItem[] {
  const out: SpanItem[] = [];
  for (let i = 0; i < n; i++) {
    const id = nextSpan++;
    const spanId = new Uint8Array(8);
    new DataView(spanId.buffer).setUint32(4, id);
    out.push({
      traceId: new Uint8Array(16).fill(0xab),
      spanId,
      name: `span ${id}`,
      kind: 2,
      startTimeUnixNano: 1_700_000_000_000_000_000n + BigInt(id),
      endTimeUnixNano: 1_700_000_000_001_000_000n + BigInt(id),
      attributes,
    });
  }
  return out;
}

/** Asserts collected = exported + dropped + queued + in flight for every signal, and that the metrics agree. */
export async function expectExactAccounting(h: Pick<Harness, "pipeline" | "metrics">): Promise<void> {
  const acc = h.pipeline.accounting();
  const text = await h.metrics.registry.metrics();
  const value = (name: string, labels = ""): number => {
    const re = new RegExp(`^svc_${name}${labels.replace(/[{}]/g, (c) => `\\${c}`)} (\\S+)$`, "m");
    const m = re.exec(text);
    return m ? Number(m[1]) : 0;
  };
  const plural = { traces: "spans", metrics: "metrics", logs: "logs", profiles: "profiles" } as const;
  for (const s of SIGNALS) {
    const a = acc[s];
    expect(a.collected).toBe(a.exported + a.droppedTotal + a.queued + a.inFlight);
    expect(value(`${plural[s]}_collected_total`)).toBe(a.collected);
    expect(value(`${plural[s]}_exported_total`)).toBe(a.exported);
    for (const [reason, n] of Object.entries(a.dropped)) expect(value(`${plural[s]}_dropped_total`, `{reason="${reason}"}`)).toBe(n);
    expect(value("export_queue_size", `{signal="${s}"}`)).toBe(a.queued);
  }
}
