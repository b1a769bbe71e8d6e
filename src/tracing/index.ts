/**
 * Self-tracing of the agent's internal operations (self_telemetry.tracing): spans of service `svc-agent` sent
 * through the agent's own export pipeline. Subsystems trace an operation with `ctx.tasks.track(name, fn)` (or
 * `startActive`), annotate it with `setSpanAttributes`, and exclude work with `suppressTracing`.
 */
import type { AgentContext } from "../agent/context";
import type { Component, ComponentHost } from "../lifecycle/component";
import { Tracer } from "./tracer";

export { Tracer, activeSpan, sampledByTraceId, setSpanAttributes, startActive, suppressTracing, SELF_RESOURCE, TRACER_SCOPE } from "./tracer";

export const TRACING_COMPONENT_ID = "self/tracing";

/** The tracer as a component: it watches the agent's operations from start to shutdown; the settings are read per operation. */
export function createTracing(ctx: AgentContext): Component[] {
  const tracer = new Tracer({ config: () => ctx.config, pipeline: ctx.pipeline });
  let host: ComponentHost | undefined;
  return [
    {
      id: TRACING_COMPONENT_ID,
      async start(h) {
        host = h;
        ctx.tasks.observers.add(tracer);
        h.report(ctx.config.self_telemetry.tracing.enabled ? "ok" : "disabled");
      },
      async reload(next) {
        host?.report(next.self_telemetry.tracing.enabled ? "ok" : "disabled");
      },
      async shutdown() {
        ctx.tasks.observers.delete(tracer);
      },
    },
  ];
}
