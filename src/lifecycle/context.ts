/** What every component factory is given: the shared, long-lived parts of the agent. */
import type { Config } from "../config/schema";
import type { Logger } from "../log/logger";
import type { MemoryGate } from "../memory/gate";
import type { StatusAggregator } from "../status/aggregator";
import type { AgentMetrics } from "../telemetry/metrics";
import type { TaskRegistry } from "../telemetry/tasks";

/** The parts that exist before any subsystem is built. */
export interface BaseContext {
  /** The configuration in force now (a getter: a successful reload replaces it). Components also get reload(). */
  readonly config: Config;
  readonly logger: Logger;
  /** Where components publish their status views (`provide`). Health and readiness come from `report`. */
  readonly status: StatusAggregator;
  readonly metrics: AgentMetrics;
  readonly tasks: TaskRegistry;
  /** Environment of the process (tests pass their own). */
  readonly env: Record<string, string | undefined>;
  /** Closed by the memory limiter above the soft limit: producers refuse new data (src/memory). Absent in some tests. */
  readonly memory?: MemoryGate;
}
