/** Schemas of the collectors that are not program sets of the eBPF core: profiling and GPU. */
import { Type, type Static } from "@sinclair/typebox";

export const ProfilingSchema = Type.Object(
  {
    enabled: Type.Boolean({ default: false, description: "CPU profiling with perf_event programs." }),
    sample_rate: Type.Integer({ minimum: 1, maximum: 10_000, default: 99, description: "Samples per second per CPU." }),
  },
  { additionalProperties: false, default: {} },
);
export type ProfilingConfig = Static<typeof ProfilingSchema>;

export const GpuSchema = Type.Object(
  { enabled: Type.Boolean({ default: false, description: "NVIDIA GPU metrics through NVML." }) },
  { additionalProperties: false, default: {} },
);
export type GpuConfig = Static<typeof GpuSchema>;
