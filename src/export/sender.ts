/**
 * The export chain: each link is a small object whose `send(request)` does its part and calls the next one.
 * Per signal queue (queue.ts) -> batch (batcher.ts), then account (the pipeline's ledger: in flight, exported,
 * dropped) -> retry (retry.ts) -> measure -> timeout -> push (the transport). chain.ts wires them; the exporter
 * component builds the chain and plugs in the push when it starts.
 */
import type { AgentMetrics } from "../telemetry/metrics";
import type { Signal } from "./config";
import { codeName, type ExportOutcome } from "./outcome";
import type { Transport } from "./transport";

/** One batch of one signal, encoded, on its way down the chain. */
export interface ExportRequest {
  signal: Signal;
  body: Uint8Array;
  /** Items in the batch. */
  items: number;
}

/** A request with the deadline of its attempt (epoch ms) and the signal that cancels calls at shutdown. */
export interface TimedRequest extends ExportRequest {
  deadline: number;
  cancel?: AbortSignal;
}

/**
 * A link of the chain. Below the batch a link answers with a promise of the outcome; the queue answers at once
 * (what it took), and the batch answers nothing (it hands on what is due, later or now).
 */
export interface Sender<Req = ExportRequest, Res = Promise<ExportOutcome>> {
  send(request: Req): Res;
}

/** The last link: sends one attempt over the transport. */
export interface PushSender extends Sender<TimedRequest> {
  /**
   * Every pending item is about to be tried at once (a flush, the start of shutdown), before the attempts: a push
   * may replace a transport that is not connected, so that the attempts do not fail at once inside the channel's
   * reconnect backoff.
   */
  beforeRetryAll(): void;
  /** Closes the transport once the calls in flight have ended. Idempotent. */
  close(): void;
}

/** What is in use now (a transport, the last link); `put` replaces it and closes the one replaced (its close() waits for its calls in flight). */
export class Slot<T extends { close(): void }> {
  #current: T | undefined;

  constructor(current?: T) {
    this.#current = current;
  }

  get current(): T | undefined {
    return this.#current;
  }

  put(next: T): void {
    const previous = this.#current;
    this.#current = next;
    if (previous && previous !== next) previous.close();
  }
}

/** The plain push: each attempt goes to the transport in use now. */
export class TransportSender implements PushSender {
  readonly #transport: Slot<Transport>;

  constructor(transport?: Transport) {
    this.#transport = new Slot(transport);
  }

  /** The transport in use (undefined before the first `use`). */
  get transport(): Transport | undefined {
    return this.#transport.current;
  }

  /** Uses `transport` for every attempt from now on (batches already retrying included); the previous one is closed once idle. */
  use(transport: Transport): void {
    this.#transport.put(transport);
  }

  send(r: TimedRequest): Promise<ExportOutcome> {
    return this.#transport.current!.send(r.signal, r.body, r.deadline, r.cancel);
  }

  beforeRetryAll(): void {}

  close(): void {
    this.#transport.current?.close();
  }
}

/** Gives each attempt its signal's `otlp.timeout` deadline and the shutdown cancel signal. */
export class TimeoutSender implements Sender {
  readonly #next: () => PushSender;
  readonly #timeoutMs: (signal: Signal) => number;
  readonly #cancel = new AbortController();

  /** `next` is read at every attempt: the push plugged in when the exporter starts. */
  constructor(next: () => PushSender, timeoutMs: (signal: Signal) => number) {
    this.#next = next;
    this.#timeoutMs = timeoutMs;
  }

  send(r: ExportRequest): Promise<ExportOutcome> {
    return this.#next().send({ signal: r.signal, body: r.body, items: r.items, deadline: Date.now() + this.#timeoutMs(r.signal), cancel: this.#cancel.signal });
  }

  /** Cancels every call in flight and every later one (the end of shutdown). */
  cancelAll(): void {
    this.#cancel.abort();
  }
}

/** Counts each attempt in the export metrics: requests, latency, errors by code. */
export class MeasureSender implements Sender {
  readonly #next: Sender;
  readonly #metrics: AgentMetrics;

  constructor(next: Sender, metrics: AgentMetrics) {
    this.#next = next;
    this.#metrics = metrics;
  }

  async send(r: ExportRequest): Promise<ExportOutcome> {
    const signal = r.signal;
    this.#metrics.exportRequests.inc({ signal });
    const started = performance.now();
    const outcome = await this.#next.send(r);
    this.#metrics.exportLatency.observe({ signal }, (performance.now() - started) / 1000);
    if (outcome.kind !== "success") this.#metrics.exportErrors.inc({ signal, code: codeName(outcome.code) });
    return outcome;
  }
}
