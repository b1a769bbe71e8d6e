/**
 * Integration harness: an Agent built in-process from YAML text (no listening), and the Elysia app over it,
 * so tests call `app.handle(new Request(...))`.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { Agent, type AgentOptions } from "../../src/agent/agent";
import { loadConfig } from "../../src/config/load";
import { Logger, type LogRecord } from "../../src/log/logger";
import { createServer } from "../../src/server/app";
import { serverDepsOf, type ServerDeps } from "../../src/server/deps";
import { OtlpReceiver, type ReceivedRequest } from "../../src/export/receiver";
import { QUIET_CONFIG } from "./agent-process";
import { waitUntil } from "./wait";

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
  /** The OTLP receiver the agent exports to (when `backend` was not false). */
  backend: OtlpReceiver | undefined;
  /** Every request the backend received. */
  received: ReceivedRequest[];
  /** Shuts the agent and its backend down. */
  stop(): Promise<void>;
}

export async function inProcessAgent(
  yaml = QUIET_CONFIG,
  options: Partial<AgentOptions> & {
    start?: boolean;
    env?: Record<string, string | undefined>;
    /** Start an in-process OTLP receiver and export to it through ${OTLP_ENDPOINT} (default true). */
    backend?: boolean;
    /** Wait until /ready says ready (default: when a backend is started). */
    waitReady?: boolean;
  } = {},
): Promise<InProcessAgent> {
  const dir = mkdtempSync(join(tmpdir(), "svc-agent-int-"));
  const configPath = join(dir, "config.yaml");
  writeFileSync(configPath, withoutMemoryLimit(yaml));
  const received: ReceivedRequest[] = [];
  let backend: OtlpReceiver | undefined;
  const env: Record<string, string | undefined> = { ...options.env };
  if (options.backend ?? true) {
    backend = new OtlpReceiver({ listen: "127.0.0.1:0", onRequest: (r) => received.push(r) });
    env.OTLP_ENDPOINT = `127.0.0.1:${await backend.start()}`;
  }
  const logs: LogRecord[] = [];
  const logger = new Logger({ sink: (line) => logs.push(JSON.parse(line) as LogRecord) });
  const agent = new Agent(loadConfig(configPath, env), { logger, env, ...options });
  const deps = serverDepsOf(agent);

  if (options.start ?? true) await agent.start();
  const app = createServer(deps);
  const request = (path: string, init?: RequestInit) => app.handle(new Request(`http://localhost${path}`, init));
  if ((options.start ?? true) && (options.waitReady ?? backend !== undefined)) {
    await waitUntil(async () => (await request("/ready")).status === 200, { what: "the agent to be ready" });
  }
  const handle: InProcessAgent = {
    agent,
    deps,
    app,
    configPath,
    logs,
    backend,
    received,
    writeConfig: (text) => writeFileSync(configPath, withoutMemoryLimit(text)),
    request,
    async stop() {
      live.delete(handle);
      await agent.shutdown();
      await backend?.stop();
    },
  };
  live.add(handle);
  return handle;
}

/**
 * The agent in-process shares the test runner's resident memory, which says nothing about the agent's own: unless
 * the configuration sets agent.memory_limit itself, the limiter is turned off.
 */
function withoutMemoryLimit(yaml: string): string {
  let doc: Record<string, any>;
  try {
    doc = (parseYaml(yaml) ?? {}) as Record<string, any>;
  } catch {
    return yaml; // an invalid document is the test's point
  }
  if (typeof doc !== "object" || Array.isArray(doc) || (doc.agent !== undefined && (typeof doc.agent !== "object" || doc.agent === null)) || doc.agent?.memory_limit !== undefined) return yaml;
  doc.agent = { ...(doc.agent ?? {}), memory_limit: { enabled: false } };
  return stringifyYaml(doc);
}

const live = new Set<InProcessAgent>();
/** Stops every in-process agent still running (call from afterAll). */
export async function stopAllAgents(): Promise<void> {
  await Promise.all([...live].map((a) => a.stop()));
}
