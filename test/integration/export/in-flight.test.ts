/**
 * queues.<signal>.max_in_flight: how many export requests of a signal are outstanding at once, against a receiver
 * on port 0 (gRPC, or OTLP/HTTP) that holds every answer until the test releases it; accounting stays exact throughout.
 */
import { afterEach, expect, test } from "bun:test";
import { OtlpReceiver } from "../../../src/export/receiver";
import type { Protocol } from "../../../src/export/config";
import { OtlpHttpBackend } from "../../helpers/fakes/otlp-http-backend";
import { PROTOCOLS, expectExactAccounting, harness, spans, testConfig, waitUntil } from "./harness";

const open: Array<{ stop(): Promise<void> }> = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.stop();
});

/** A receiver of `protocol` that answers OK only when `release()` is called, one held request per call. */
async function holdingReceiver(protocol: Protocol) {
  const held: Array<(r: { ok: true }) => void> = [];
  let received = 0;
  const options = {
    listen: "127.0.0.1:0",
    onRequest: (r: { items: number }) => void (received += r.items > 0 ? 1 : 0),
    respond: (r: { items: number }) => (r.items > 0 ? new Promise<{ ok: true }>((resolve) => held.push(resolve)) : { ok: true as const }),
  };
  const receiver = protocol === "grpc" ? new OtlpReceiver(options) : new OtlpHttpBackend(options);
  const port = await receiver.start();
  open.push({ stop: async () => (held.splice(0).forEach((r) => r({ ok: true })), await receiver.stop()) });
  return {
    endpoint: `127.0.0.1:${port}`,
    received: () => received,
    held: () => held.length,
    release: () => held.shift()!({ ok: true }),
  };
}

for (const protocol of PROTOCOLS) {
  for (const maxInFlight of [1, 3]) {
    test(`${protocol}: max_in_flight ${maxInFlight}: that many requests outstanding, the next one sent when one is answered`, async () => {
      const backend = await holdingReceiver(protocol);
      const h = harness(testConfig({ otlp: { endpoint: backend.endpoint, protocol }, queues: { traces: { batch_size: 5, batch_timeout: "1h", max_in_flight: maxInFlight } } }));
      open.push(h);
      await h.start();
      h.pipeline.submit("traces", spans(30));
      await waitUntil(() => backend.held() === maxInFlight, { what: `${maxInFlight} requests held` });
      expect(h.pipeline.accounting().traces).toMatchObject({ collected: 30, inFlight: 5 * maxInFlight, queued: 30 - 5 * maxInFlight });
      await expectExactAccounting(h);
      // Each answer lets exactly one more batch go: the count held stays at the limit while batches remain.
      for (let answered = 1; answered <= 6 - maxInFlight; answered++) {
        backend.release();
        await waitUntil(() => backend.received() === maxInFlight + answered && backend.held() === maxInFlight, { what: `request ${maxInFlight + answered}` });
        expect(h.pipeline.accounting().traces.inFlight).toBe(5 * maxInFlight);
        await expectExactAccounting(h);
      }
      while (backend.held() > 0) backend.release();
      await waitUntil(() => h.pipeline.accounting().traces.exported === 30, { what: "all exported" });
      expect(backend.received()).toBe(6);
      await expectExactAccounting(h);
    });
  }
}
