/** The key `agent.gpu`, owned by the GPU collector. */
import { Type, type Static } from "@sinclair/typebox";
import type { ConfigProblem } from "../../config/problems";
import { keysIn } from "../../config/compose";
import type { Config } from "../../config/schema";
import { Duration, msOf } from "../../config/units";

export const GpuSchema = Type.Object(
  {
    enabled: Type.Boolean({ default: false, description: "NVIDIA GPU metrics through NVML." }),
    interval: Duration("10s", "How often the devices are read and their metrics exported."),
    library: Type.String({
      default: "libnvidia-ml.so.1",
      minLength: 1,
      description: "The NVML library to load: a soname searched by the dynamic linker, or an absolute path.",
    }),
  },
  { additionalProperties: false, default: {} },
);
export type GpuConfig = Static<typeof GpuSchema>;

/** Its keys, rules and switch, composed by src/collectors/registry.ts, where it has its entry. */
export const gpuConfig = {
  config: { gpu: GpuSchema },
  enabled: (c: Config): boolean => gpuOf(c).enabled,
  validate(c: { gpu: GpuConfig }): ConfigProblem[] {
    return msOf(c.gpu, "interval") <= 0 ? [{ path: "agent.gpu.interval", message: "must be greater than 0" }] : [];
  },
};

/** `agent.gpu` of a running configuration. */
export const gpuOf = (c: Config): GpuConfig => keysIn(gpuConfig, c.agent).gpu;
