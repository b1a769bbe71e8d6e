/**
 * Wiring of the subsystems, in start order: downstream first (the export pipeline), then the collectors,
 * then discovery. The HTTP server is added last by the Agent itself.
 * A collector joins the agent by its entry in src/collectors/registry.ts; its code is loaded when it is turned on.
 */
import type { Component } from "../lifecycle/component";
import { createExport } from "../export";
import { createDiscovery } from "../discovery";
import { WorkloadRegistry } from "../workloads/registry";
import { createEbpfComponents, EbpfCore, NATIVE_DEPS } from "../ebpf";
import { createDebugComponent } from "../debug/component";
import { createTracing } from "../tracing";
import { COLLECTORS, partOf } from "../collectors/registry";
import { lazyComponents, type LazyComponent } from "../lifecycle/lazy";
import { createMemoryLimiter } from "../memory/limiter";
import { MemoryGate } from "../memory/gate";
import type { BaseContext } from "../lifecycle/context";
import type { AgentContext } from "../collectors/context";

export type ComponentFactory = (ctx: AgentContext) => Component[];

/**
 * The agent's own observers, in start order, before the collectors: self-tracing and the debug runtime first (so
 * they see the collectors' loads), then the eBPF core's own program set. Each factory returns its components.
 */
export const OBSERVER_FACTORIES: ComponentFactory[] = [createTracing, (ctx) => [createDebugComponent(ctx)], (ctx) => createEbpfComponents(ctx.ebpf)];

/** Every registered collector's components, each loaded when the configuration first turns its collector on (disabled ones report `disabled`). */
function collectorComponents(ctx: AgentContext): LazyComponent[] {
  return COLLECTORS.flatMap((entry) =>
    lazyComponents({ ids: entry.ids, readiness: entry.readiness, enabled: (c) => partOf(entry).enabled(c), load: async () => (await entry.load()).bind(undefined, ctx) }, () => ctx.config),
  );
}

export interface Subsystems {
  ctx: AgentContext;
  /** In start order. */
  components: Component[];
  /** Loads the code of the collectors the configuration turns on and makes their components; awaited before the start. */
  prepare(): Promise<void>;
}

export function buildSubsystems(base: BaseContext): Subsystems {
  // The memory limiter starts first: the gate it closes is read by everything after it.
  const limiter = createMemoryLimiter(base, base.memory ?? new MemoryGate());
  const exporter = createExport(base);
  const discovery = createDiscovery({ ...base, pipeline: exporter.pipeline });
  const ebpf = new EbpfCore(base, NATIVE_DEPS);
  const workloads = new WorkloadRegistry(discovery.directory);
  workloads.attachProcesses(ebpf.processes);
  const ctx: AgentContext = Object.create(base, {
    pipeline: { value: exporter.pipeline, enumerable: true },
    workloads: { value: workloads, enumerable: true },
    ebpf: { value: ebpf, enumerable: true },
  });
  const collectors = collectorComponents(ctx);
  const prepare = async (): Promise<void> => {
    for (const c of collectors) await c.prepare();
  };
  return { ctx, components: [limiter, ...exporter.components, ...OBSERVER_FACTORIES.flatMap((f) => f(ctx)), ...collectors, ...discovery.components], prepare };
}
