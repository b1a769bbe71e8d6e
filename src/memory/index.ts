/**
 * The agent's memory limiter: `agent.memory_limit` (soft and hard limits, by default derived from the cgroup's
 * memory limit), the gate that producers read (the export pipeline at submit, the eBPF program sets through a
 * flag map in the kernel), and the defaults the deployment files derive their memory request and limit from.
 */
export { MemoryLimitSchema, validateMemoryLimit, resolveLimits, deploymentMemory, DEFAULT_HARD_LIMIT_BYTES, CGROUP_LIMIT_FRACTION, SOFT_LIMIT_FRACTION, type MemoryLimits } from "./config";
export { MemoryGate, MEMORY_LIMIT_REASON } from "./gate";
export { MemoryLimiter, createMemoryLimiter, checkDelayMs, GROWTH_PER_CHECK_BYTES, MAX_CHECK_STRETCH, type MemoryLimiterOptions } from "./limiter";
export { cgroupMemoryLimit } from "./cgroup";
