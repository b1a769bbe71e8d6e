/**
 * Which transport carries which signal: the resolved per-signal settings (`signalTarget`) pick OTLP/gRPC or
 * OTLP/HTTP. Signals on gRPC with the same address, TLS, headers and compression share one channel; every
 * signal on HTTP shares one HttpTransport (its requests carry their own URL and headers). When one transport
 * carries every signal it is used as it is; otherwise a SignalRouter sends each signal to its own.
 */
import type { Config } from "../config/schema";
import { msOf } from "../config/units";
import { SIGNALS, signalTarget, type Signal, type SignalTarget } from "./config";
import type { ExportOutcome } from "./outcome";
import type { Transport } from "./transport";
import { HttpTransport } from "./transport-http";

/** Sends each signal through the transport that carries it; ready when every one of them is. */
export class SignalRouter implements Transport {
  readonly #bySignal: Record<Signal, Transport>;
  readonly #all: Transport[];

  constructor(bySignal: Record<Signal, Transport>) {
    this.#bySignal = bySignal;
    this.#all = [...new Set(Object.values(bySignal))];
  }

  send(signal: Signal, body: Uint8Array, deadline: number, abort?: AbortSignal): Promise<ExportOutcome> {
    return this.#bySignal[signal].send(signal, body, deadline, abort);
  }

  ready(): boolean {
    return this.#all.every((t) => t.ready());
  }

  /** The refusal probe of the traces transport (the one connectivity checks use). */
  refusedNow(timeoutMs: number): Promise<boolean> {
    const t = this.#bySignal.traces;
    return t.refusedNow ? t.refusedNow(timeoutMs) : Promise.resolve(false);
  }

  close(): void {
    for (const t of this.#all) t.close();
  }
}

/** Builds the transport(s) of `config` (throws TransportConfigError when a TLS file cannot be read). Connects lazily. */
export function transportFor(config: Config): Transport {
  const targets = Object.fromEntries(SIGNALS.map((s) => [s, signalTarget(config.otlp, s)])) as Record<Signal, SignalTarget>;
  const reconnectInitialMs = msOf(config.backoff, "initial");
  const reconnectMaxMs = msOf(config.backoff, "max");
  const http = SIGNALS.filter((s) => targets[s].protocol === "http/protobuf");
  const bySignal = {} as Record<Signal, Transport>;
  if (http.length > 0) {
    const t = new HttpTransport({ otlp: config.otlp, targets: Object.fromEntries(http.map((s) => [s, targets[s]])) });
    for (const s of http) bySignal[s] = t;
  }
  if (http.length === SIGNALS.length) return bySignal.traces;
  // @grpc/grpc-js (its module evaluation is ~12 ms of start-up here) is loaded only when a signal goes over gRPC.
  const { GrpcTransport } = require("./transport-grpc") as typeof import("./transport-grpc");
  const channels = new Map<string, Transport>();
  for (const s of SIGNALS) {
    if (bySignal[s]) continue;
    const { address, insecure, headers, compression } = targets[s];
    const key = JSON.stringify([address, insecure, headers, compression]);
    let t = channels.get(key);
    if (!t) {
      t = new GrpcTransport({ otlp: config.otlp, target: targets[s], reconnectInitialMs, reconnectMaxMs });
      channels.set(key, t);
    }
    bySignal[s] = t;
  }
  const distinct = new Set(Object.values(bySignal));
  return distinct.size === 1 ? bySignal.traces : new SignalRouter(bySignal);
}
