/** The `profiling` status view: the profiling fields of GET /status. */
import { Type, type Static } from "@sinclair/typebox";
import type { Config } from "../../config/schema";
import { Count, type StatusSection } from "../../status/model";
import { profilingOf } from "./config";

/** `profiling` view: the profiling fields of GET /status (no route of its own). */
export const ProfilingViewSchema = Type.Object({
  enabled: Type.Boolean(),
  sample_rate: Count("Samples per second."),
  profiles_collected: Count("Profiles collected."),
});
export type ProfilingView = Static<typeof ProfilingViewSchema>;

export const PROFILING_STATUS: StatusSection<ProfilingView, ProfilingView, Config> = {
  name: "profiling",
  disabled: (c) => ({ enabled: false, sample_rate: profilingOf(c).sample_rate, profiles_collected: 0 }),
  summary: (v) => v,
};
