/** What every component factory is given: the shared, long-lived parts of the agent. */
import type { Config } from "../config/schema";
import type { Logger } from "../log/logger";
import type { StatusAggregator } from "../status/aggregator";
import type { AgentMetrics } from "../telemetry/metrics";
import type { TaskRegistry } from "../telemetry/tasks";

export interface AgentContext {
  /** The configuration the agent started with; later versions arrive through Component.reload. */
  readonly config: Config;
  readonly logger: Logger;
  /** Where components publish their status views (`provide`). Health and readiness come from `report`. */
  readonly status: StatusAggregator;
  readonly metrics: AgentMetrics;
  readonly tasks: TaskRegistry;
  /** Environment of the process (tests pass their own). */
  readonly env: Record<string, string | undefined>;
}
