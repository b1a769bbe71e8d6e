/** Self-tracing of eBPF loads on the real kernel: loading the process program set is an operation that becomes a span. */
import { afterAll, expect, test } from "bun:test";
import { decodeRequest } from "../../../src/export/receiver";
import { inProcessAgent, stopAllAgents } from "../../helpers/in-process";
import { waitUntil } from "../../helpers/wait";
import { quietConfig } from "../../helpers/quiet-config";

afterAll(stopAllAgents);

test("an eBPF program set's load is a span of service svc-agent", async () => {
  const a = await inProcessAgent(
    quietConfig({ selfTelemetry: "  tracing:\n    enabled: true\n    sample_rate: 1.0", ebpf: "    enabled: true\n    network:\n      enabled: false" }),
    { waitReady: true },
  );
  const names = () =>
    a.received
      .filter((r) => r.signal === "traces")
      .flatMap((r) => {
        const body = decodeRequest("traces", r.body) as { resourceSpans?: Array<{ scopeSpans?: Array<{ spans?: Array<{ name: string }> }> }> };
        return (body.resourceSpans ?? []).flatMap((rs) => (rs.scopeSpans ?? []).flatMap((ss) => (ss.spans ?? []).map((s) => s.name)));
      });
  await waitUntil(
    async () => {
      await a.deps.pipeline.flush(2000);
      return names().some((n) => /^ebpf\/\S+ load$/.test(n));
    },
    { what: "a span of an eBPF load", timeoutMs: 20_000 },
  );
  expect(names().filter((n) => n === "ebpf/process load").length).toBe(1);
}, 30_000);
