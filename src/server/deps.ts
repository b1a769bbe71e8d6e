/** What the HTTP interface needs from the agent; the Agent provides it, tests may pass fakes. */
import type { ReloadOutcome } from "../agent/agent";
import type { Config } from "../config/schema";
import type { TelemetryPipeline } from "../export/types";
import type { Mutex } from "../lifecycle/mutex";
import type { Logger } from "../log/logger";
import type { StatusAggregator } from "../status/aggregator";
import type { AgentMetrics } from "../telemetry/metrics";
import type { TaskRegistry } from "../telemetry/tasks";
import type { BuildInfo } from "../version";

export interface ServerDeps {
  /** The configuration in force (read per request: reloads take effect on the next request). */
  config(): Config;
  status: StatusAggregator;
  metrics: AgentMetrics;
  tasks: TaskRegistry;
  logger: Logger;
  pipeline: Pick<TelemetryPipeline, "flush">;
  /** Re-reads and applies the configuration file; serialised with other reloads. */
  reload(trigger: string): Promise<ReloadOutcome>;
  build: BuildInfo;
  startedAt: Date;
  /** The agent's locks whose waits the mutex profile reports (the Supervisor's reload lock). */
  locks?: readonly Mutex[];
}
