/**
 * The agent: builds the shared context and the components from the configuration, starts them
 * downstream first (HTTP server last), reloads atomically, and shuts down in reverse.
 */
import { ConfigError, formatProblem } from "../config/problems";
import { loadConfig, type LoadedConfig } from "../config/load";
import type { ConfigDocument } from "../config/document";
import { msOf } from "../config/units";
import type { Logger } from "../log/logger";
import type { Component } from "../lifecycle/component";
import { ReloadApplyError, Supervisor } from "../lifecycle/supervisor";
import { StatusAggregator } from "../status/aggregator";
import { AgentMetrics } from "../telemetry/metrics";
import { TaskRegistry } from "../telemetry/tasks";
import { buildSubsystems } from "./components";
import { MemoryGate } from "../memory/gate";
import type { BaseContext } from "../lifecycle/context";
import type { AgentContext } from "../collectors/context";
import { secretsOf } from "../config/secrets";

export interface AgentOptions {
  logger: Logger;
  env: Record<string, string | undefined>;
  /** --debug on the command line: forces self_telemetry.debug.enabled on every (re)load. */
  forceDebug?: boolean;
  /** Extra components (tests); added after the configured ones, before the HTTP server. */
  extraComponents?: (ctx: AgentContext) => Component[];
  /** The HTTP server component; created by main (kept out of here so the agent does not depend on the server). */
  serverFactory?: (agent: Agent) => Component;
}

export type ReloadOutcome =
  | { ok: true; message: string }
  | { ok: false; kind: "invalid"; error: ConfigError }
  | { ok: false; kind: "apply"; error: Error };

export class Agent {
  #config: ConfigDocument;
  readonly loaded: LoadedConfig;
  readonly logger: Logger;
  readonly status = new StatusAggregator();
  readonly tasks = new TaskRegistry();
  readonly metrics: AgentMetrics;
  readonly supervisor: Supervisor;
  readonly ctx: AgentContext;
  readonly #options: AgentOptions;
  readonly #prepare: () => Promise<void>;
  #shuttingDown: Promise<void> | undefined;
  /** Bumped on every successful reload. */
  generation = 0;

  constructor(loaded: LoadedConfig, options: AgentOptions) {
    this.loaded = loaded;
    this.#options = options;
    this.#config = this.#withFlags(loaded.config);
    this.logger = options.logger;
    this.#applyLogging(this.#config);
    this.metrics = new AgentMetrics(this.#config.self_telemetry.prometheus_namespace, this.tasks);
    this.supervisor = new Supervisor(this.logger, this.status);
    const agent = this;
    const base: BaseContext = {
      get config() {
        return agent.#config;
      },
      logger: this.logger,
      status: this.status,
      metrics: this.metrics,
      tasks: this.tasks,
      env: options.env,
      memory: new MemoryGate(),
    };
    const subsystems = buildSubsystems(base);
    this.ctx = subsystems.ctx;
    this.#prepare = subsystems.prepare;
    for (const c of subsystems.components) this.supervisor.add(c);
    for (const c of options.extraComponents?.(this.ctx) ?? []) this.supervisor.add(c);
    if (options.serverFactory) this.supervisor.add(options.serverFactory(this));
  }

  /** The running configuration (replaced atomically by a successful reload). */
  get config(): ConfigDocument {
    return this.#config;
  }

  /** Starts every component, downstream first. */
  async start(): Promise<void> {
    const began = performance.now();
    this.logger.info("starting", { config: this.loaded.source, mode: this.#config.mode });
    await this.#prepare();
    await this.supervisor.startAll();
    this.logger.info("started", { duration_ms: Math.round(performance.now() - began) });
  }

  /**
   * Re-reads the file the agent started with, validates it, and applies it to every component atomically.
   * Serialised by the reload lock: a reload that arrives while another runs waits for it.
   */
  reload(trigger: string): Promise<ReloadOutcome> {
    return this.tasks.track(`reload (${trigger})`, () => this.#reloadLocked(trigger));
  }

  #reloadLocked(trigger: string): Promise<ReloadOutcome> {
    return this.supervisor.reloadLock.run(async () => {
      let next: ConfigDocument;
      try {
        next = this.#withFlags(loadConfig(this.loaded.path, this.#options.env).config);
      } catch (e) {
        const error = e instanceof ConfigError ? e : new ConfigError([{ path: "", message: (e as Error).message }]);
        this.logger.warn("reload rejected: invalid configuration", { trigger, problems: error.problems.map(formatProblem) });
        return { ok: false, kind: "invalid", error };
      }
      const previous = this.#config;
      try {
        this.#config = next;
        this.#applyLogging(next);
        await this.supervisor.applyReload(next, previous);
        this.metrics.setNamespace(next.self_telemetry.prometheus_namespace);
      } catch (e) {
        this.#config = previous;
        this.#applyLogging(previous);
        const error = e instanceof ReloadApplyError ? e : (e as Error);
        this.logger.error("reload failed; previous configuration restored", { trigger, error: error.message });
        return { ok: false, kind: "apply", error };
      }
      this.generation++;
      const source = this.loaded.path ?? "embedded defaults";
      this.logger.info("configuration reloaded", { trigger, source, generation: this.generation });
      return { ok: true, message: `configuration reloaded from ${source}` };
    });
  }

  /** Stops every component in reverse order within `shutdown_timeout`. Idempotent. */
  shutdown(): Promise<void> {
    this.#shuttingDown ??= (async () => {
      const timeoutMs = msOf(this.#config, "shutdown_timeout");
      this.logger.info("shutting down", { timeout_ms: timeoutMs });
      await this.supervisor.shutdownAll(timeoutMs);
      this.logger.info("stopped");
    })();
    return this.#shuttingDown;
  }

  #withFlags(c: ConfigDocument): ConfigDocument {
    if (this.#options.forceDebug && !c.self_telemetry.debug.enabled)
      return { ...c, self_telemetry: { ...c.self_telemetry, debug: { enabled: true } } };
    return c;
  }

  #applyLogging(c: ConfigDocument): void {
    this.logger.configure(c.svc);
    this.logger.setSecrets(secretsOf(c));
  }
}
