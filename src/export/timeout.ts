/** The fourth link: gives each attempt the `otlp.timeout` deadline and the shutdown cancel signal. */
import type { Signal } from "./config";
import type { ExportOutcome } from "./outcome";
import type { Transport } from "./transport";

export function sendWithTimeout(transport: Transport, signal: Signal, body: Uint8Array, timeoutMs: number, cancel?: AbortSignal): Promise<ExportOutcome> {
  return transport.send(signal, body, Date.now() + timeoutMs, cancel);
}
