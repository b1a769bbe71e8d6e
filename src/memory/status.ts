/** The `memory` status view: the memory fields of GET /status (no route of its own). */
import { Type } from "@sinclair/typebox";
import type { StatusSection } from "../status/model";
import { MEMORY_VIEW, type MemoryView } from "./limiter";

export const MemoryViewSchema = Type.Object({
  enabled: Type.Boolean({ description: "agent.memory_limit.enabled" }),
  resident_bytes: Type.Integer({ minimum: 0, description: "Resident memory at the last check." }),
  soft_limit_bytes: Type.Integer({ minimum: 0, description: "Above it new data is refused (dropped as memory_limit)." }),
  hard_limit_bytes: Type.Integer({ minimum: 0 }),
  refusing: Type.Boolean({ description: "Whether new data is refused now." }),
  refusals: Type.Integer({ minimum: 0, description: "Times the soft limit was crossed upwards since start." }),
  refused_in_kernel: Type.Integer({ minimum: 0, description: "Events the eBPF programs refused in the kernel while refusing (HTTP exchanges are also counted as spans dropped with reason memory_limit)." }),
});
export const MEMORY_STATUS: StatusSection<MemoryView, MemoryView> = {
  name: MEMORY_VIEW,
  disabled: () => ({ enabled: false, resident_bytes: 0, soft_limit_bytes: 0, hard_limit_bytes: 0, refusing: false, refusals: 0, refused_in_kernel: 0 }),
  summary: (v) => v,
};
