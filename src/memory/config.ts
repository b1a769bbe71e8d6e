/**
 * `agent.memory_limit`: the soft and hard limits of the agent's resident memory, and the defaults the
 * deployment files derive the DaemonSet's memory request and limit from (test/deploy keeps them in step).
 *
 * `limit: auto` is CGROUP_LIMIT_FRACTION of the cgroup's memory limit (the rest is left to what the cgroup
 * charges besides the agent's RSS: eBPF maps, page cache), or DEFAULT_HARD_LIMIT_BYTES outside a limited
 * cgroup; `soft_limit: auto` is SOFT_LIMIT_FRACTION of the limit. The DaemonSet's limit is the cgroup limit
 * that makes `auto` give the default hard limit, and its request is the default soft limit.
 */
import { Type, type Static } from "@sinclair/typebox";
import type { ConfigProblem } from "../config/problems";
import { Duration, Size, msOf, bytesOf } from "../config/units";

/** The hard limit outside a cgroup with a memory limit. */
export const DEFAULT_HARD_LIMIT_BYTES = 400 * 2 ** 20;
/** `limit: auto` in a cgroup with a memory limit: this fraction of it. */
export const CGROUP_LIMIT_FRACTION = 0.8;
/** `soft_limit: auto`: this fraction of the hard limit. */
export const SOFT_LIMIT_FRACTION = 0.8;
const MIB = 2 ** 20;

const AutoOrSize = (description: string) => Type.Union([Type.Literal("auto"), Size(0, description)], { default: "auto", description });

export const MemoryLimitSchema = Type.Object(
  {
    enabled: Type.Boolean({ default: true, description: "Watch the agent's resident memory and refuse new data above the soft limit." }),
    limit: AutoOrSize(
      `Hard limit of the agent's resident memory (size, or auto: ${CGROUP_LIMIT_FRACTION * 100}% of the cgroup's memory limit, else ${DEFAULT_HARD_LIMIT_BYTES / MIB}MiB). Above it the agent also collects garbage at once.`,
    ),
    soft_limit: AutoOrSize(
      `Above this resident memory the agent refuses new data, in the kernel and in user space, counted as dropped with reason memory_limit, until it falls below 90% of it (size, or auto: ${SOFT_LIMIT_FRACTION * 100}% of limit). A size above the hard limit that limit: auto gives is not used: the auto soft limit is, with a warning.`,
    ),
    check_interval: Duration(
      "10ms",
      "How often resident memory is compared with the limits (reading it costs a few microseconds) while within 8 MiB of the soft limit or refusing; with more headroom one interval more per 8 MiB, up to 10 intervals.",
    ),
  },
  { additionalProperties: false, default: {} },
);

export type MemoryLimitConfig = Static<typeof MemoryLimitSchema>;

export interface MemoryLimits {
  softBytes: number;
  hardBytes: number;
  /** Where the hard limit comes from: `configured`, `cgroup` (auto, in a limited cgroup) or `default`. */
  source: "configured" | "cgroup" | "default";
  /**
   * Why the configured soft_limit is not the one in force: it is above a hard limit that `limit: auto` gave (the
   * configuration cannot be refused for it, the cgroup being known only at run time), so the auto soft limit is.
   */
  softLimitIgnored?: string;
}

/** `b` bytes as whole MiB, for messages. */
export const mibText = (b: number) => `${(b / MIB).toFixed(0)} MiB`;

/** The limits in force, given the cgroup's memory limit (undefined: none). */
export function resolveLimits(c: MemoryLimitConfig, cgroupLimitBytes: number | undefined): MemoryLimits {
  let hardBytes: number;
  let source: MemoryLimits["source"];
  if (c.limit !== "auto") [hardBytes, source] = [bytesOf(c, "limit"), "configured"];
  else if (cgroupLimitBytes !== undefined) [hardBytes, source] = [Math.floor(cgroupLimitBytes * CGROUP_LIMIT_FRACTION), "cgroup"];
  else [hardBytes, source] = [DEFAULT_HARD_LIMIT_BYTES, "default"];
  const autoSoftBytes = Math.floor(hardBytes * SOFT_LIMIT_FRACTION);
  if (c.soft_limit === "auto") return { softBytes: autoSoftBytes, hardBytes, source };
  const configured = bytesOf(c, "soft_limit");
  if (configured <= hardBytes) return { softBytes: configured, hardBytes, source };
  // Only with limit: auto (validateMemoryLimit refuses a soft limit above an explicit one). A soft limit at the hard
  // limit would start refusing only once RSS is there; the auto one leaves the usual room below it.
  const from = source === "cgroup" ? `${CGROUP_LIMIT_FRACTION * 100}% of the cgroup's memory limit` : "the default outside a limited cgroup";
  const softLimitIgnored = `soft_limit ${mibText(configured)} is above the hard limit ${mibText(hardBytes)} (limit: auto, ${from}); the auto soft limit ${mibText(autoSoftBytes)} is used`;
  return { softBytes: autoSoftBytes, hardBytes, source, softLimitIgnored };
}

/**
 * The DaemonSet's memory request and limit, derived from the defaults: the limit is the cgroup limit under which
 * `limit: auto` gives DEFAULT_HARD_LIMIT_BYTES, the request the default soft limit. Both in MiB, rounded up.
 */
export function deploymentMemory(): { requestMiB: number; limitMiB: number } {
  return {
    requestMiB: Math.ceil((DEFAULT_HARD_LIMIT_BYTES * SOFT_LIMIT_FRACTION) / MIB),
    limitMiB: Math.ceil(DEFAULT_HARD_LIMIT_BYTES / CGROUP_LIMIT_FRACTION / MIB),
  };
}

export function validateMemoryLimit(c: MemoryLimitConfig, path = "agent.memory_limit"): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  if (c.limit !== "auto" && bytesOf(c, "limit") <= 0) problems.push({ path: `${path}.limit`, message: "must be auto or a size greater than 0" });
  if (c.soft_limit !== "auto" && bytesOf(c, "soft_limit") <= 0) problems.push({ path: `${path}.soft_limit`, message: "must be auto or a size greater than 0" });
  if (c.limit !== "auto" && c.soft_limit !== "auto" && bytesOf(c, "soft_limit") > bytesOf(c, "limit"))
    problems.push({ path: `${path}.soft_limit`, message: "must not be above limit" });
  if (msOf(c, "check_interval") <= 0) problems.push({ path: `${path}.check_interval`, message: "must be greater than 0" });
  return problems;
}
