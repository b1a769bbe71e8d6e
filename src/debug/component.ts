/** The component that switches the debug runtime (event-loop watch, task stacks) with self_telemetry.debug.enabled. */
import type { BaseContext } from "../lifecycle/context";
import type { Component } from "../lifecycle/component";
import { gcMonitor } from "./gc-monitor";
import { debugRuntimeFor } from "./runtime";

export const DEBUG_COMPONENT_ID = "self/debug";

export function createDebugComponent(ctx: BaseContext): Component {
  const runtime = debugRuntimeFor(ctx.tasks);
  // GC figures of /debug/vars count from here (cheap: one record per collection, drained periodically).
  gcMonitor();
  // Stack capture starts now, so the tasks of components started before this one carry their stacks too.
  ctx.tasks.captureStacks = ctx.config.self_telemetry.debug.enabled;
  return {
    id: DEBUG_COMPONENT_ID,
    async start(host) {
      const on = ctx.config.self_telemetry.debug.enabled;
      runtime.setEnabled(on);
      host.report(on ? "ok" : "disabled");
      if (on) host.logger.info("debug mode: /debug/* served, event loop watched, task stacks captured");
    },
    async reload(next) {
      runtime.setEnabled(next.self_telemetry.debug.enabled);
    },
    async shutdown() {
      runtime.setEnabled(false);
    },
  };
}
