/**
 * The pipeline writes a batch's request into a buffer that later batches write again once that batch was exported:
 * a batch being retried keeps its own bytes meanwhile, and every request decodes to exactly its batch's spans.
 * Encoded items are views of arenas written again once all of their items were released (their request built).
 */
import { expect, test } from "bun:test";
import { parseConfig } from "../../../src/config/load";
import { ItemEncoder, type EncodedItem } from "../../../src/export/encode";
import type { SpanItem } from "../../../src/export/model";
import { spans } from "../../integration/export/harness";
import { ResourceBuilder } from "../../../src/export/resource";
import { OtlpPipeline } from "../../../src/export/pipeline";
import { decodeRequest } from "../../../src/export/receiver";
import { TransportSender } from "../../../src/export/sender";
import type { Transport } from "../../../src/export/transport";
import { Logger } from "../../../src/log/logger";
import { AgentMetrics } from "../../../src/telemetry/metrics";
import { TaskRegistry } from "../../../src/telemetry/tasks";

/** A span named `span N` whose url.path grows with `size` (requests and arenas of several sizes). */
function span(size: number): SpanItem {
  return spans(1, { "http.request.method": "GET", "url.path": `/items/${"x".repeat(size * 37)}` })[0]!;
}

const names = (body: Uint8Array) => (decodeRequest("traces", body) as any).resourceSpans.flatMap((r: any) => r.scopeSpans.flatMap((s: any) => s.spans.map((x: any) => x.name)));

test("a retried batch resends the same bytes while exported batches' buffers are written again", async () => {
  const config = parseConfig(
    `
backoff:
  initial: 300ms
  max: 300ms
queues:
  traces:
    batch_size: 2
    batch_timeout: 1h
    max_in_flight: 2
`,
    {},
  );
  const tasks = new TaskRegistry();
  /** Each attempt: the body handed over (a view), a copy of its bytes then, and the outcome given. */
  const attempts: Array<{ body: Uint8Array; copy: Uint8Array; names: string[]; retryable: boolean }> = [];
  const transport: Transport = {
    async send(_signal, body) {
      const retryable = attempts.length === 0;
      attempts.push({ body, copy: body.slice(), names: names(body), retryable });
      return retryable ? { kind: "retryable", code: 14, message: "down", delayMs: undefined } : { kind: "success", rejected: 0, message: "" };
    },
    ready: () => true,
    close() {},
  };
  const pipeline = new OtlpPipeline({ config, metrics: new AgentMetrics("svc", tasks), logger: new Logger({ sink: () => {} }), tasks, random: () => 0.5 });
  pipeline.connect(new TransportSender(transport));
  try {
    const batches = [[span(1), span(2)]];
    expect(pipeline.submit("traces", batches[0]!)).toBe(2);
    for (let i = 0; i < 50 && attempts.length < 1; i++) await Bun.sleep(1);
    // While the first batch waits for its retry, three more are exported one after another in the other slot.
    for (const id of [3, 5, 7]) {
      const before = attempts.length;
      batches.push([span(id), span(id + 1)]);
      expect(pipeline.submit("traces", batches.at(-1)!)).toBe(2);
      for (let i = 0; i < 200 && attempts.length === before; i++) await Bun.sleep(1);
    }
    const batchNames = batches.map((b) => b.map((x) => x.name));
    expect(attempts.map((a) => a.names)).toEqual(batchNames);
    // The exported batches' requests were written into the same buffer.
    expect(attempts[2]!.body.buffer).toBe(attempts[1]!.body.buffer);
    expect(attempts[3]!.body.buffer).toBe(attempts[1]!.body.buffer);
    await pipeline.flush(5000);
    expect(pipeline.accounting().traces.exported).toBe(8);
    expect(attempts).toHaveLength(5);
    const [first, , , , retry] = attempts;
    expect(retry!.names).toEqual(batchNames[0]!);
    expect(retry!.body).toBe(first!.body);
    expect(retry!.copy).toEqual(first!.copy);
    expect(retry!.body.buffer).not.toBe(attempts[1]!.body.buffer);
  } finally {
    await pipeline.shutdown(AbortSignal.timeout(5000));
  }
});

test("an arena is written again only once every item written into it was released", () => {
  const resource = new ResourceBuilder("unit");
  const encoder = new ItemEncoder(resource.encoder);
  const held: Array<{ item: EncodedItem; copy: Uint8Array }> = [];
  const buffers = new Set<ArrayBufferLike>();
  let reused = 0;
  let written = 0;
  for (let id = 0; id < 6000; id++) {
    const item = encoder.encode("traces", span(id % 40));
    if (buffers.has(item.bytes.buffer) && held.every((h) => h.item.bytes.buffer !== item.bytes.buffer || h.item === item)) reused++;
    buffers.add(item.bytes.buffer);
    written += item.bytes.length;
    held.push({ item, copy: item.bytes.slice() });
    // A batch of the oldest 512 is released (and released again: nothing more happens) once 1,000 are held.
    if (held.length === 1000) {
      const batch = held.splice(0, 512).map((h) => h.item);
      encoder.release(batch);
      encoder.release(batch);
    }
    if (id % 250 === 0) for (const h of held) expect(h.item.bytes).toEqual(h.copy);
  }
  for (const h of held) expect(h.item.bytes).toEqual(h.copy);
  expect(reused).toBeGreaterThan(0);
  // Fewer arenas than the bytes written would fill (256 KiB each).
  expect(buffers.size).toBeLessThan(written / (256 * 1024) / 1.5);
});
