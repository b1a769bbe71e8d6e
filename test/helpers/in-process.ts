/**
 * Integration harness: an Agent built in-process from YAML text (no listening), and the Elysia app over it,
 * so tests call `app.handle(new Request(...))`.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent, type AgentOptions } from "../../src/agent/agent";
import { loadConfig } from "../../src/config/load";
import { Logger, type LogRecord } from "../../src/log/logger";
import { createServer } from "../../src/server/app";
import type { ServerDeps } from "../../src/server/deps";
import { BUILD_INFO } from "../../src/version";
import { QUIET_CONFIG } from "./agent-process";

export interface InProcessAgent {
  agent: Agent;
  deps: ServerDeps;
  app: ReturnType<typeof createServer>;
  configPath: string;
  /** Rewrites the configuration file (for reload tests). */
  writeConfig(yaml: string): void;
  /** Every log line written, as parsed records. */
  logs: LogRecord[];
  /** GET/POST helper: path relative to the app, returns the Response. */
  request(path: string, init?: RequestInit): Promise<Response>;
}

export async function inProcessAgent(
  yaml = QUIET_CONFIG,
  options: Partial<AgentOptions> & { start?: boolean; env?: Record<string, string | undefined> } = {},
): Promise<InProcessAgent> {
  const dir = mkdtempSync(join(tmpdir(), "svc-agent-int-"));
  const configPath = join(dir, "config.yaml");
  writeFileSync(configPath, yaml);
  const env = options.env ?? {};
  const logs: LogRecord[] = [];
  const logger = new Logger({ sink: (line) => logs.push(JSON.parse(line) as LogRecord) });
  const agent = new Agent(loadConfig(configPath, env), { logger, env, ...options });
  const deps: ServerDeps = {
    config: () => agent.config,
    status: agent.status,
    metrics: agent.metrics,
    tasks: agent.tasks,
    logger: agent.logger,
    pipeline: agent.ctx.pipeline,
    reload: (trigger) => agent.reload(trigger),
    build: BUILD_INFO,
    startedAt: agent.status.startedAt,
  };
  if (options.start ?? true) await agent.start();
  const app = createServer(deps);
  return {
    agent,
    deps,
    app,
    configPath,
    logs,
    writeConfig: (text) => writeFileSync(configPath, text),
    request: (path, init) => app.handle(new Request(`http://localhost${path}`, init)),
  };
}
