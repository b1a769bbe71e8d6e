/**
 * CPU profiling (`collector/profiling`, config `agent.profiling`): perf_event programs on the cpu-clock of every
 * CPU count (process, kernel stack, user stack) in the kernel; once per interval the counts are read, the stacks
 * symbolized (kallsyms, ELF symbols cached by build id, perf maps and jitdump files of JIT runtimes), and one
 * OTLP profile per process is exported. Each period is also available as pprof.
 */
import type { AgentContext } from "../context";
import { ProfilingCollector } from "./profiler";

export { ProfilingCollector, profileSetSpec, PROFILE_SET_NAME, PROFILING_SCOPE, type ProfilerOptions } from "./profiler";
export { Symbolizer, parseMaps, KERNEL_BINARY } from "./symbolizer";
export { encodePprof } from "./pprof";

const collectors = new WeakMap<object, ProfilingCollector>();

export function createProfilingCollector(ctx: AgentContext): ProfilingCollector {
  const c = new ProfilingCollector(ctx, { core: ctx.ebpf });
  collectors.set(ctx.status, c);
  return c;
}

/**
 * The last period's profile of every profiled process as gzipped pprof (profile.proto), for operator-facing
 * endpoints (e.g. the debug routes): undefined when profiling is off or no period has ended yet.
 * Keyed by the agent's status aggregator, like the eBPF core.
 */
export function latestCollectedPprof(status: object): Uint8Array | undefined {
  return collectors.get(status)?.latestPprof();
}
