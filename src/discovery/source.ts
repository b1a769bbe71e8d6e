/**
 * The lifecycle the discovery sources share: settings read from the configuration; `start` begins the source's
 * background run; a reload that changes the settings stops the run and begins a new one (a reload that cannot be
 * applied throws from `readSettings` and changes nothing); `shutdown` stops it. Safe to call twice and without start.
 */
import type { ComponentHost } from "../lifecycle/host";

/** A source's background work: aborted and awaited when it stops. */
export interface SourceRun {
  abort: AbortController;
  done: Promise<void>;
}

/**
 * A source's settings `S` come from its own keys `D` of `agent.discovery` (its config.ts): the source knows
 * nothing else of the configuration, which is composed from the sources (sources.ts).
 */
export abstract class DiscoverySource<S, D> {
  abstract readonly id: string;
  readonly readiness = "discovery" as const;
  protected settings: S;
  /** Set between start and shutdown. */
  protected host: ComponentHost | undefined;
  #run: SourceRun | undefined;

  constructor(settings: S) {
    this.settings = settings;
  }

  /** The source's settings from its keys `d`; throws, changing nothing, when they cannot be applied. */
  protected abstract readSettings(d: D): S;
  /** Begins the work for the current settings and reports the state; undefined when there is nothing to run. */
  protected abstract begin(host: ComponentHost): SourceRun | undefined;
  /** Forgets what the stopped run found (caches, directory entries, resource attributes). */
  protected abstract forget(): void;

  async start(host: ComponentHost): Promise<void> {
    this.host = host;
    this.#run = this.begin(host);
  }

  async reload(next: { agent: { discovery: D } }): Promise<void> {
    const s = this.readSettings(next.agent.discovery);
    if (JSON.stringify(s) === JSON.stringify(this.settings)) return;
    const host = this.host;
    if (!host) {
      this.settings = s;
      return;
    }
    await this.#stop();
    this.settings = s;
    this.#run = this.begin(host);
  }

  async shutdown(): Promise<void> {
    await this.#stop();
    this.host = undefined;
  }

  async #stop(): Promise<void> {
    const run = this.#run;
    this.#run = undefined;
    if (run) {
      run.abort.abort();
      await run.done;
    }
    this.forget();
  }
}
