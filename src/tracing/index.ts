/**
 * Self-tracing of the agent's internal operations (self_telemetry.tracing): spans of service `svc-agent` sent
 * through the agent's own export pipeline. Subsystems trace an operation with `ctx.tasks.track(name, fn)` (or
 * `startActive`), annotate it with `setSpanAttributes`, and exclude work with `suppressTracing`.
 */
import type { TelemetryPipeline } from "../export/types";
import type { BaseContext } from "../lifecycle/context";
import type { Component, ComponentHost } from "../lifecycle/component";
import { Tracer } from "./tracer";

export { Tracer, activeSpan, sampledByTraceId, setSpanAttributes, startActive, suppressTracing, TRACER_SCOPE } from "./tracer";

export const TRACING_COMPONENT_ID = "self/tracing";

/**
 * The tracer as a component: it watches the agent's operations while self_telemetry.tracing is enabled (a reload
 * turns it on or off); the other settings are read per operation. Not watching while disabled lets every HTTP
 * request begin and end its operation on the registry's unwatched path.
 */
export function createTracing(ctx: BaseContext & { readonly pipeline: TelemetryPipeline }): Component[] {
  const tracer = new Tracer({ config: () => ctx.config, pipeline: ctx.pipeline });
  let host: ComponentHost | undefined;
  const apply = (enabled: boolean) => {
    if (enabled) ctx.tasks.observers.add(tracer);
    else ctx.tasks.observers.delete(tracer);
    host?.report(enabled ? "ok" : "disabled");
  };
  return [
    {
      id: TRACING_COMPONENT_ID,
      async start(h) {
        host = h;
        apply(ctx.config.self_telemetry.tracing.enabled);
      },
      async reload(next) {
        apply(next.self_telemetry.tracing.enabled);
      },
      async shutdown() {
        ctx.tasks.observers.delete(tracer);
      },
    },
  ];
}
