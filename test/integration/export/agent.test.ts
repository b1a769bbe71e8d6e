/**
 * The export subsystem inside a whole in-process Agent: collectors' submits through ctx.pipeline, POST
 * /admin/flush, GET /status/export and /ready, reload through the supervisor, and drain on agent shutdown.
 */
import { afterAll, expect, test } from "bun:test";
import { QUIET_CONFIG } from "../../helpers/agent-process";
import { inProcessAgent, stopAllAgents } from "../../helpers/in-process";
import { spans } from "./harness";

afterAll(() => stopAllAgents());

test("submit, POST /admin/flush, /status/export and /ready through the agent", async () => {
  const a = await inProcessAgent(QUIET_CONFIG + "queues:\n  traces:\n    batch_timeout: 1h\n  logs:\n    batch_timeout: 1h\n");
  expect(a.agent.ctx.pipeline.submit("traces", spans(6))).toBe(6);
  a.agent.ctx.pipeline.submit("logs", [{ observedTimeUnixNano: 1n, body: "via agent" }]);
  const res = await a.request("/admin/flush", { method: "POST" });
  expect(res.status).toBe(200);
  expect(await res.json()).toMatchObject({ status: "ok", flushed: { traces: 6, metrics: 0, logs: 1 }, remaining: { traces: 0, metrics: 0, logs: 0 }, reason: null });
  expect(a.received.filter((r) => r.signal === "traces").reduce((n, r) => n + r.items, 0)).toBe(6);
  const view = (await (await a.request("/status/export")).json()) as Record<string, any>;
  expect(view.queues.traces).toMatchObject({ size: 0, exported: 6, dropped: 0 });
  expect(view.connected).toBe(true);
  const ready = (await (await a.request("/ready")).json()) as { checks: Record<string, string> };
  expect(ready.checks.otlp).toBe("ok");
  const acc = a.agent.ctx.pipeline.accounting!();
  expect(acc.traces.collected).toBe(acc.traces.exported + acc.traces.droppedTotal + acc.traces.queued + acc.traces.inFlight);
  await a.stop();
});

test("reload through the agent: queue sizes apply; an unreadable CA file is refused and nothing changes", async () => {
  const a = await inProcessAgent(QUIET_CONFIG);
  a.writeConfig(QUIET_CONFIG + "queues:\n  traces:\n    capacity: 777\n");
  expect((await a.agent.reload("test")).ok).toBe(true);
  let view = (await (await a.request("/status/export")).json()) as Record<string, any>;
  expect(view.queues.traces.capacity).toBe(777);
  a.writeConfig(QUIET_CONFIG.replace("otlp:\n", "otlp:\n  insecure: false\n  tls:\n    ca_file: /nonexistent/ca.pem\n") + "queues:\n  traces:\n    capacity: 5\n");
  const outcome = await a.agent.reload("test");
  expect(outcome.ok).toBe(false);
  view = (await (await a.request("/status/export")).json()) as Record<string, any>;
  expect(view.queues.traces.capacity).toBe(777);
  expect(view.tls).toBe(false);
  a.agent.ctx.pipeline.submit("traces", spans(2));
  expect((await a.agent.ctx.pipeline.flush(5000)).exported).toMatchObject({ traces: 2 });
  await a.stop();
});

test("agent shutdown drains what is queued to the backend", async () => {
  const a = await inProcessAgent(QUIET_CONFIG + "queues:\n  traces:\n    batch_timeout: 1h\n");
  a.agent.ctx.pipeline.submit("traces", spans(40));
  await a.agent.shutdown();
  expect(a.received.filter((r) => r.signal === "traces").reduce((n, r) => n + r.items, 0)).toBe(40);
  const acc = a.agent.ctx.pipeline.accounting!().traces;
  expect(acc).toMatchObject({ collected: 40, exported: 40, queued: 0, inFlight: 0, droppedTotal: 0 });
  await a.stop();
});
