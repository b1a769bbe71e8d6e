/**
 * exporter/otlp with the backend refusing connections: after a `connection refused` outcome the connectivity
 * checks ask the transport's refusal probe first and make no Export call while it says refused; readiness keeps
 * the reason; a backend that comes back on the port is found by the next check (the probe says "not refused",
 * the real call succeeds) and the agent is ready again.
 */
import { afterEach, expect, test } from "bun:test";
import type { Config } from "../../../src/config/schema";
import { transportFor } from "../../../src/export/transport-select";
import type { Transport } from "../../../src/export/transport";
import { PROTOCOLS, TestBackend, harness, testConfig, waitUntil } from "./harness";

const open: Array<{ stop(): Promise<void> }> = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.stop();
});

/** The real transport, counting empty Export calls (connectivity checks) and probe answers. */
function countingFactory() {
  const counts = { checkCalls: 0, probes: 0, refused: 0 };
  const factory = (config: Config): Transport => {
    const t = transportFor(config);
    return {
      send(signal, body, deadline, abort) {
        if (body.length === 0) counts.checkCalls++;
        return t.send(signal, body, deadline, abort);
      },
      ready: () => t.ready(),
      async refusedNow(timeoutMs) {
        counts.probes++;
        const r = await t.refusedNow!(timeoutMs);
        if (r) counts.refused++;
        return r;
      },
      close: () => t.close(),
    };
  };
  return { counts, factory };
}

for (const protocol of PROTOCOLS) {
  test(`${protocol}: refused backend: checks probe instead of calling; the backend's return is found and readiness recovers`, async () => {
    const probe = await new TestBackend({ protocol }).start();
    const port = probe.port;
    await probe.stop();
    const { counts, factory } = countingFactory();
    // backoff.initial 20ms (testConfig): a check every 20 ms while unreachable.
    const h = harness(testConfig({ otlp: { endpoint: `127.0.0.1:${port}`, protocol } }), { transportFactory: factory });
    open.push(h);
    await h.start();
    await waitUntil(() => h.readiness() === "failed: connection refused", { what: "readiness to fail" });
    const callsAtFailure = counts.checkCalls;
    await waitUntil(() => counts.refused >= 5, { what: "five refused probes" });
    // Every check since the refusal was answered by the probe: no Export call made, reason unchanged.
    expect(counts.checkCalls).toBe(callsAtFailure);
    expect(h.readiness()).toBe("failed: connection refused");
    expect(h.component.view().last_error).toContain("UNAVAILABLE");

    const backend = await new TestBackend({ listen: `127.0.0.1:${port}`, protocol }).start();
    open.push(backend);
    await waitUntil(() => h.readiness() === "ok", { what: "ready again", timeoutMs: 10_000 });
    expect(counts.checkCalls).toBeGreaterThan(callsAtFailure);
    expect(h.component.view().connected).toBe(true);
    expect(h.component.view().last_error).toBeNull();
  });
}
