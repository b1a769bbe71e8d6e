/**
 * `discovery/docker`: lists running containers over the Engine API socket, then follows /events
 * (start, die, destroy, rename). The event stream is opened before the list and its events are applied
 * after it, so nothing that happens in between is missed; after a broken stream it reconnects with
 * backoff and lists again. With `enabled: true` a missing socket is a recoverable error with the reason (readiness
 * fails), never a crash; with `enabled: auto` (the default) a host without the socket is not a fault: the source
 * reports itself disabled with the reason and looks for the socket again every reconnect_backoff_max.
 */
import { existsSync } from "node:fs";
import { msOf } from "../../config/units";
import type { ComponentHost } from "../../lifecycle/host";
import { DiscoverySource, type SourceRun } from "../source";
import type { TaskRegistry } from "../../telemetry/tasks";
import { Backoff, errorText, sleep } from "../backoff";
import type { ContainerDirectory } from "../directory";
import type { DockerConfig } from "./config";
import { dockerAttributes, dockerServiceName, fromInspect, fromSummary, type DockerContainer } from "./containers";
import { EngineClient, type EngineEvent } from "./engine-client";

export const DOCKER_COMPONENT_ID = "discovery/docker";
export const DOCKER_INITIAL_BACKOFF_MS = 250;
/** Inspect requests in flight at once during a list. */
export const INSPECT_CONCURRENCY = 8;

/** What the view needs of Docker discovery, copied at the time of the call. */
export interface DockerSnapshot {
  /** docker.enabled in force is true or auto. */
  enabled: boolean;
  /** The initial list completed and the event stream is open. */
  connected: boolean;
  /** Running containers known now. */
  containers: DockerContainer[];
}

interface Settings {
  enabled: boolean | "auto";
  socket: string;
  backoffMaxMs: number;
}

function settingsOf(c: DockerConfig): Settings {
  const d = c.docker;
  return { enabled: d.enabled, socket: d.socket, backoffMaxMs: msOf(d, "reconnect_backoff_max") };
}

export class DockerSource extends DiscoverySource<Settings, DockerConfig> {
  readonly id = DOCKER_COMPONENT_ID;
  #containers = new Map<string, DockerContainer>();
  #connected = false;
  /** Bumped on every change of the container set (the view uses it to cache derived data). */
  generation = 0;

  constructor(
    config: DockerConfig,
    readonly directory: ContainerDirectory,
    readonly tasks: TaskRegistry,
  ) {
    super(settingsOf(config));
  }

  snapshot(): DockerSnapshot {
    return { enabled: this.enabled, connected: this.#connected, containers: [...this.#containers.values()] };
  }

  /** snapshot().enabled, without copying the container list. */
  get enabled(): boolean {
    return this.settings.enabled !== false;
  }

  /** snapshot().connected. */
  get connected(): boolean {
    return this.#connected;
  }

  get containerCount(): number {
    return this.#containers.size;
  }

  protected readSettings(next: DockerConfig): Settings {
    return settingsOf(next);
  }

  protected begin(host: ComponentHost): SourceRun | undefined {
    if (this.settings.enabled === false) {
      host.report("disabled");
      return undefined;
    }
    host.report("starting");
    const abort = new AbortController();
    const endTask = this.tasks.begin(`${DOCKER_COMPONENT_ID} events ${this.settings.socket}`);
    const done = this.#loop(host, abort.signal).finally(endTask);
    return { abort, done };
  }

  protected forget(): void {
    this.#connected = false;
    this.#containers.clear();
    this.generation++;
    this.directory.clear("docker");
  }

  async #loop(host: ComponentHost, signal: AbortSignal): Promise<void> {
    const { socket, backoffMaxMs } = this.settings;
    const client = new EngineClient(socket);
    const backoff = new Backoff(DOCKER_INITIAL_BACKOFF_MS, backoffMaxMs);
    let waitingLogged = false;
    while (!signal.aborted) {
      if (this.settings.enabled === "auto" && !existsSync(socket)) {
        // auto: a host without Docker is not a fault; look for the socket again after the longest backoff.
        host.report("disabled", `docker socket ${socket} absent (docker.enabled: auto); waiting for it`);
        if (!waitingLogged) host.logger.info("docker socket absent; docker discovery waits for it (docker.enabled: auto)", { socket });
        waitingLogged = true;
        await sleep(backoffMaxMs, signal);
        continue;
      }
      try {
        await this.#session(client, host, backoff, signal);
        if (signal.aborted) break;
        throw new Error("docker: event stream closed by the engine");
      } catch (e) {
        if (signal.aborted) break;
        const wasConnected = this.#connected;
        this.#connected = false;
        const reason = errorText(e);
        host.report("recoverable_error", reason);
        if (wasConnected) host.logger.warn("docker engine connection lost; reconnecting", { reason });
      }
      await sleep(backoff.nextDelayMs(), signal);
    }
  }

  /** One connection: open events, list, then apply events until the stream ends. */
  async #session(client: EngineClient, host: ComponentHost, backoff: Backoff, outer: AbortSignal): Promise<void> {
    // The stream is ended with the session whatever ends it (a failed list or inspect included).
    const session = new AbortController();
    const signal = AbortSignal.any([outer, session.signal]);
    const stream = await client.events(signal);
    const pending: EngineEvent[] = [];
    let wake: (() => void) | undefined;
    let ended = false;
    let streamError: unknown;
    const pump = (async () => {
      try {
        for await (const ev of stream) {
          pending.push(ev);
          wake?.();
        }
      } catch (e) {
        const err = e as { code?: string; message?: string };
        streamError = new Error(`docker: event stream broken: ${err.code ?? err.message ?? String(e)}`);
      } finally {
        ended = true;
        wake?.();
      }
    })();
    try {
      await this.tasks.track(`${DOCKER_COMPONENT_ID} list`, () => this.#list(client, signal));
      this.#connected = true;
      backoff.reset();
      host.report("ok");
      host.logger.info("docker engine connected", { socket: client.socket, containers: this.#containers.size });
      for (;;) {
        while (pending.length > 0) await this.#apply(client, pending.shift()!, signal);
        if (ended || signal.aborted) break;
        await new Promise<void>((resolve) => {
          wake = resolve;
          if (pending.length > 0 || ended) resolve();
        });
        wake = undefined;
      }
      if (streamError && !signal.aborted) throw streamError;
    } finally {
      session.abort();
      await pump.catch(() => undefined);
    }
  }

  async #list(client: EngineClient, signal: AbortSignal): Promise<void> {
    const summaries = await client.list(signal);
    const next = new Map<string, DockerContainer>();
    let i = 0;
    const worker = async () => {
      while (i < summaries.length) {
        const s = summaries[i++]!;
        const inspected = await client.inspect(s.Id, signal);
        if (!inspected || !inspected.State.Running) continue;
        next.set(s.Id, fromSummary(s, inspected.State.Pid));
      }
    };
    await Promise.all(Array.from({ length: Math.min(INSPECT_CONCURRENCY, summaries.length) }, worker));
    this.#containers = next;
    this.generation++;
    this.directory.replace(
      "docker",
      [...next.values()].map((c) => ({ id: c.id, attributes: dockerAttributes(c), pid: c.pid || undefined, addresses: c.addresses, service: dockerServiceName(c) })),
    );
  }

  async #apply(client: EngineClient, ev: EngineEvent, signal: AbortSignal): Promise<void> {
    const id = ev.Actor?.ID;
    if (ev.Type !== "container" || !id) return;
    switch (ev.Action) {
      case "start": {
        const inspected = await client.inspect(id, signal);
        if (!inspected || !inspected.State.Running) return;
        this.#put(fromInspect(inspected));
        return;
      }
      case "die":
      case "destroy":
        if (this.#containers.delete(id)) {
          this.generation++;
          this.directory.remove("docker", id);
        }
        return;
      case "rename": {
        const c = this.#containers.get(id);
        const name = ev.Actor.Attributes?.name;
        if (c && name) this.#put({ ...c, name: name.replace(/^\//, "") });
        return;
      }
    }
  }

  #put(c: DockerContainer): void {
    this.#containers.set(c.id, c);
    this.generation++;
    this.directory.set("docker", { id: c.id, attributes: dockerAttributes(c), pid: c.pid || undefined, addresses: c.addresses, service: dockerServiceName(c) });
  }
}
