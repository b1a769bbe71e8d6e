/**
 * Wiring of the subsystems, in start order: downstream first (the export pipeline), then the collectors,
 * then discovery. The HTTP server is added last by the Agent itself.
 * A collector joins the agent by adding its factory to COLLECTOR_FACTORIES.
 */
import type { Component } from "../lifecycle/component";
import { createExport } from "../export";
import { createDiscovery } from "../discovery";
import { WorkloadRegistry } from "../workloads/registry";
import { createEbpfComponents, EbpfCore, NATIVE_DEPS } from "../ebpf";
import { createDebugComponent } from "../debug/component";
import { createTracing } from "../tracing";
import { createLogsCollector } from "../collectors/logs";
import { createGpuCollector } from "../collectors/gpu";
import { createNetworkCollectors } from "../collectors/network";
import { createSyscallCollectors } from "../collectors/syscalls";
import { createProfilingCollector } from "../collectors/profiling";
import { createMemoryLimiter } from "../memory/limiter";
import { MemoryGate } from "../memory/gate";
import type { BaseContext } from "../lifecycle/context";
import type { AgentContext } from "../collectors/context";

export type ComponentFactory = (ctx: AgentContext) => Component[];

/**
 * Collectors and the agent's own observers, in start order: self-tracing and the debug runtime first (so they see
 * the collectors' loads), then each collector. Each factory returns its components (disabled ones report `disabled`).
 */
export const COLLECTOR_FACTORIES: ComponentFactory[] = [
  createTracing,
  (ctx) => [createDebugComponent(ctx)],
  (ctx) => createEbpfComponents(ctx.ebpf),
  (ctx) => [createLogsCollector(ctx)],
  (ctx) => [createGpuCollector(ctx)],
  createNetworkCollectors,
  createSyscallCollectors,
  (ctx) => [createProfilingCollector(ctx)],
];

export interface Subsystems {
  ctx: AgentContext;
  /** In start order. */
  components: Component[];
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
  const collectors = COLLECTOR_FACTORIES.flatMap((f) => f(ctx));
  return { ctx, components: [limiter, ...exporter.components, ...collectors, ...discovery.components] };
}
