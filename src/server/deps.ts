/** What the HTTP interface needs from the agent; the Agent provides it, tests may pass fakes. */
import type { Agent, ReloadOutcome } from "../agent/agent";
import type { ConfigDocument } from "../config/document";
import type { TelemetryPipeline } from "../export/types";
import type { Mutex } from "../lifecycle/mutex";
import type { Logger } from "../log/logger";
import type { StatusAggregator } from "../status/aggregator";
import type { AgentMetrics } from "../telemetry/metrics";
import type { TaskRegistry } from "../telemetry/tasks";
import { BUILD_INFO, type BuildInfo } from "../version";

export interface ServerDeps {
  /** The configuration in force (read per request: reloads take effect on the next request). */
  config(): ConfigDocument;
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

/** The HTTP interface's view of a running Agent. */
export function serverDepsOf(agent: Agent): ServerDeps {
  return {
    config: () => agent.config,
    status: agent.status,
    metrics: agent.metrics,
    tasks: agent.tasks,
    logger: agent.logger,
    // A tracked operation: a span (child of the admin request) when self-tracing is on.
    pipeline: { flush: (timeoutMs) => agent.tasks.track("flush", () => agent.ctx.pipeline.flush(timeoutMs)) },
    reload: (trigger) => agent.reload(trigger),
    build: BUILD_INFO,
    startedAt: agent.status.startedAt,
    locks: [agent.supervisor.reloadLock],
  };
}
