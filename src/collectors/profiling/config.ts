/** The key `agent.profiling`, owned by the CPU profiler. */
import { Type, type Static } from "@sinclair/typebox";
import type { ConfigProblem } from "../../config/problems";
import { keysIn } from "../../config/compose";
import type { Config } from "../../config/schema";
import { Duration, msOf } from "../../config/units";

const MIN_PROFILING_INTERVAL_MS = 1000;

export const ProfilingSchema = Type.Object(
  {
    enabled: Type.Boolean({ default: false, description: "CPU profiling with perf_event programs." }),
    sample_rate: Type.Integer({ minimum: 1, maximum: 10_000, default: 99, description: "Samples per second per CPU." }),
    interval: Duration("10s", "How often the in-kernel counts are read and one profile per process is exported."),
    pid: Type.Integer({
      minimum: 0,
      default: 0,
      description: "Profile only this process (its pid in the host's pid namespace); 0 profiles every process.",
    }),
    pprof_dir: Type.String({
      default: "",
      description: "Directory where each period's profile is also written as gzipped pprof (profile.proto); empty: not written.",
    }),
    pprof_keep: Type.Integer({ minimum: 1, default: 10, description: "How many pprof files pprof_dir keeps (oldest removed first)." }),
  },
  { additionalProperties: false, default: {} },
);
export type ProfilingConfig = Static<typeof ProfilingSchema>;

/** Its keys, rules and switch, composed by src/collectors/registry.ts, where it has its entry. */
export const profilingConfig = {
  config: { profiling: ProfilingSchema },
  enabled: (c: Config): boolean => profilingOf(c).enabled,
  validate(c: { profiling: ProfilingConfig }): ConfigProblem[] {
    return msOf(c.profiling, "interval") < MIN_PROFILING_INTERVAL_MS ? [{ path: "agent.profiling.interval", message: `must be at least 1s, got ${c.profiling.interval}` }] : [];
  },
};

/** `agent.profiling` of a running configuration. */
export const profilingOf = (c: Config): ProfilingConfig => keysIn(profilingConfig, c.agent).profiling;
