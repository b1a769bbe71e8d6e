/**
 * CPU profiling (`collector/profiling`, config `agent.profiling`): perf_event programs on the cpu-clock of every
 * CPU count (process, kernel stack, user stack) in the kernel; once per interval the counts are read, the stacks
 * symbolized (kallsyms, ELF symbols cached by build id, perf maps and jitdump files of JIT runtimes), and one
 * OTLP profile per process is exported. Each period is also available as pprof.
 */
import type { AgentContext } from "../../agent/context";
import { ebpfCore } from "../../ebpf";
import { ProfilingCollector } from "./profiler";

export { ProfilingCollector, profileSetSpec, PROFILE_SET_NAME, PROFILING_SCOPE, type ProfilerOptions } from "./profiler";
export { Symbolizer, parseMaps, KERNEL_BINARY } from "./symbolizer";
export { encodePprof } from "./pprof";

export function createProfilingCollector(ctx: AgentContext): ProfilingCollector {
  return new ProfilingCollector(ctx, { core: ebpfCore(ctx) });
}
