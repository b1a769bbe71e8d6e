/**
 * Self-tracing of the compiled binary over real sockets: with sample_rate 1.0 every admin action sent to
 * dist/svc-agent produces spans of service svc-agent at an OTLP receiver, each reload and flush nested under its
 * HTTP request (the request path through Bun.serve, not app.handle).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { decodeRequest, OtlpReceiver, type ReceivedRequest } from "../../src/export/receiver";
import { QUIET_CONFIG, spawnAgent, type AgentProcess } from "../helpers/agent-process";
import { waitUntil } from "../helpers/wait";

const received: ReceivedRequest[] = [];
let backend: OtlpReceiver;
let agent: AgentProcess;

beforeAll(async () => {
  backend = new OtlpReceiver({ listen: "127.0.0.1:0", onRequest: (r) => received.push(r) });
  const endpoint = `127.0.0.1:${await backend.start()}`;
  const config = QUIET_CONFIG.replace("self_telemetry:\n", "self_telemetry:\n  tracing:\n    enabled: true\n    sample_rate: 1.0\n");
  agent = await spawnAgent({ config, env: { OTLP_ENDPOINT: endpoint } });
  // The HTTP interface answers before the rest starts; a request that arrives before self-tracing watches is
  // not traced (its operation began unwatched).
  await agent.waitFor((r) => r.msg === "started");
});
afterAll(async () => {
  await agent?.stop();
  await backend?.stop();
});

interface Span {
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
}

function spans(): Array<Span & { service: string }> {
  const out: Array<Span & { service: string }> = [];
  for (const r of received) {
    if (r.signal !== "traces") continue;
    const body = decodeRequest("traces", r.body) as {
      resourceSpans?: Array<{ resource?: { attributes?: Array<{ key: string; value: { stringValue?: string } }> }; scopeSpans?: Array<{ spans?: Span[] }> }>;
    };
    for (const rs of body.resourceSpans ?? []) {
      const service = rs.resource?.attributes?.find((a) => a.key === "service.name")?.value.stringValue ?? "";
      for (const ss of rs.scopeSpans ?? []) for (const s of ss.spans ?? []) out.push({ ...s, service });
    }
  }
  return out;
}

test("sample_rate 1.0: every admin action is a span at the receiver, reload and flush under their requests", async () => {
  const ACTIONS = 3;
  for (let i = 0; i < ACTIONS; i++) {
    expect((await fetch(`${agent.url}/admin/reload`, { method: "POST" })).status).toBe(200);
    expect((await fetch(`${agent.url}/admin/flush`, { method: "POST" })).status).toBe(200);
  }
  // The last flush's own span is exported by the next batch; ask once more until all arrived.
  await waitUntil(
    async () => {
      const s = spans();
      const reloads = s.filter((x) => x.name === "reload (admin)").length;
      const flushes = s.filter((x) => x.name === "flush").length;
      if (reloads >= ACTIONS && flushes >= ACTIONS) return true;
      await fetch(`${agent.url}/healthz`);
      return false;
    },
    { what: "spans of every admin action", timeoutMs: 20_000, intervalMs: 200 },
  );
  const s = spans();
  for (const x of s) expect(x.service).toBe("svc-agent");
  const requests = s.filter((x) => x.name === "POST /admin/reload" || x.name === "POST /admin/flush");
  expect(requests.filter((x) => x.name === "POST /admin/reload").length).toBe(ACTIONS);
  for (const child of s.filter((x) => x.name === "reload (admin)" || x.name === "flush")) {
    const parent = requests.find((r) => r.spanId === child.parentSpanId);
    expect(parent).toBeDefined();
    expect(parent!.traceId).toBe(child.traceId);
  }
}, 40_000);
