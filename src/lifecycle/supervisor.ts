/**
 * Starts components downstream first, shuts them down in reverse, and runs reloads one at a time.
 * It is the host every component reports to; the reports go to the status aggregator.
 */
import type { Config } from "../config/schema";
import type { Logger } from "../log/logger";
import type { StatusAggregator } from "../status/aggregator";
import type { Component, ComponentHost, ComponentState } from "./component";
import { Mutex } from "./mutex";

export class Supervisor {
  readonly #components: Component[] = [];
  readonly #started = new Set<Component>();
  /** Serialises reloads (admin endpoint and SIGHUP share it); its wait figures feed the mutex profile. */
  readonly reloadLock = new Mutex("reload");

  constructor(
    readonly logger: Logger,
    readonly status: StatusAggregator,
  ) {}

  /** Adds a component; components start in the order added (add downstream ones first). */
  add(component: Component): void {
    if (this.#components.some((c) => c.id === component.id)) throw new Error(`duplicate component id ${component.id}`);
    this.#components.push(component);
    this.status.report(component.id, component.readiness, "starting");
  }

  get components(): readonly Component[] {
    return this.#components;
  }

  hostFor(component: Component): ComponentHost {
    const logger = this.logger.child({ component: component.id });
    return {
      logger,
      report: (state: ComponentState, reason?: string) => {
        const prev = this.status.component(component.id);
        if (prev?.state !== state || prev.reason !== reason) {
          const level = state === "fatal_error" || state === "permanent_error" ? "error" : state === "recoverable_error" ? "warn" : "debug";
          logger.write(level, "component status", { state, ...(reason ? { reason } : {}) });
        }
        this.status.report(component.id, component.readiness, state, reason);
      },
    };
  }

  /**
   * Starts every component in order, those that start early (the HTTP interface) first. One that throws is
   * reported `permanent_error` and the rest still start. Between two starts the event loop gets a turn, so that
   * an early component answers (probes) while the others start.
   */
  async startAll(): Promise<void> {
    // Held through the start: the HTTP interface answers before the rest has started, and a reload it takes
    // (or a SIGHUP) then waits for the start instead of offering a configuration to components not yet started.
    await this.reloadLock.run(async () => {
      const order = [...this.#components.filter((c) => c.startsEarly), ...this.#components.filter((c) => !c.startsEarly)];
      for (const c of order) {
        const host = this.hostFor(c);
        try {
          this.#started.add(c);
          await c.start(host);
        } catch (e) {
          host.report("permanent_error", `start failed: ${(e as Error).message}`);
        }
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    });
  }

  /** Shuts every started component down in reverse order, each bounded by the shared deadline. */
  async shutdownAll(timeoutMs: number): Promise<void> {
    const deadline = AbortSignal.timeout(timeoutMs);
    for (const c of [...this.#components].reverse()) {
      if (!this.#started.has(c)) continue;
      this.status.report(c.id, c.readiness, "stopping");
      try {
        await c.shutdown(deadline);
      } catch (e) {
        this.logger.error("shutdown failed", { component: c.id, error: (e as Error).message });
      }
      this.#started.delete(c);
      this.status.report(c.id, c.readiness, "stopped");
    }
  }

  /**
   * Offers `next` to every component in start order. If one throws, those that already applied it get
   * `previous` back (in reverse order) and the error is rethrown. Callers hold `reloadLock`.
   */
  async applyReload(next: Config, previous: Config): Promise<void> {
    const applied: Component[] = [];
    for (const c of this.#components) {
      if (!c.reload) continue;
      try {
        await c.reload(next, previous);
        applied.push(c);
      } catch (e) {
        for (const done of applied.reverse()) {
          try {
            await done.reload!(previous, next);
          } catch (rollbackError) {
            this.logger.error("reload rollback failed", { component: done.id, error: (rollbackError as Error).message });
          }
        }
        throw new ReloadApplyError(c.id, e as Error);
      }
    }
  }
}

/** A component refused or failed to apply a configuration; the previous one was restored. */
export class ReloadApplyError extends Error {
  constructor(
    readonly component: string,
    override readonly cause: Error,
  ) {
    super(`${component}: ${cause.message}`);
    this.name = "ReloadApplyError";
  }
}
