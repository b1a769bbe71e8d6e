/**
 * Log collection (`collector/logs`, config `agent.logs`): tails container log files (CRI and Docker JSON line
 * formats), follows rotation and truncation, keeps read positions in a checkpoint file, labels records with
 * container and Kubernetes attributes and exports them as OTLP logs. Severity and time are read from the message
 * (message.ts); multiline rules join stack traces into one record (multiline.ts). Backpressure pauses reading.
 */
import type { AgentContext } from "../context";
import type { Config } from "../../config/schema";
import type { Component, ComponentHost } from "../../lifecycle/component";
import { TailEngine } from "./tail-engine";
import { logsOf } from "./config";

export { TailEngine, LOGS_SCOPE } from "./tail-engine";
export { parseLine, parseCri, parseDocker, parseRfc3339Nano } from "./parse";
export { readMessage, severityOfLevel, parseTimeValue } from "./message";
export { MultilineAssembler } from "./multiline";

/** Deadline of the final checkpoint flush when a reload replaces the tailer. */
const RELOAD_STOP_MS = 5000;

export function createLogsCollector(ctx: AgentContext): Component {
  let engine: TailEngine | undefined;
  let host: ComponentHost | undefined;

  const launch = (config: Config): void => {
    const c = logsOf(config);
    if (!c.enabled) {
      host?.report("disabled");
      return;
    }
    const h = host!;
    const next = new TailEngine({
      config: c,
      pipeline: ctx.pipeline,
      workloads: ctx.workloads,
      logger: h.logger,
      onProblem: (p) => (p ? h.report("recoverable_error", p) : h.report("ok")),
      onTruncated: (reason) => ctx.metrics.logsTruncated.inc({ reason }),
    });
    next.start();
    engine = next;
    h.logger.info("tailing log files", { include: c.include, files: next.stats.files, checkpoint_file: c.checkpoint_file });
    h.report("ok");
  };

  return {
    id: "collector/logs",
    async start(h) {
      host = h;
      try {
        launch(ctx.config);
      } catch (e) {
        h.report("permanent_error", (e as Error).message);
      }
    },
    async shutdown(deadline) {
      const e = engine;
      engine = undefined;
      if (!e) return;
      const left = new Promise<void>((r) => deadline.addEventListener("abort", () => r(), { once: true }));
      await Promise.race([e.stop(RELOAD_STOP_MS), left]);
    },
    async reload(next, previous) {
      if (JSON.stringify(logsOf(next)) === JSON.stringify(logsOf(previous)) || !host) return;
      await engine?.stop(RELOAD_STOP_MS);
      engine = undefined;
      try {
        launch(next);
      } catch (e) {
        launch(previous);
        throw e;
      }
    },
  };
}
