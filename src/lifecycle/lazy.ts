/**
 * Components whose code is loaded on first use: a group of components (one collector's) made by a factory that
 * `load()` brings in, once, when `enabled(config)` first holds, at start or at a reload that turns it on. Until
 * then each stands in with its id and reports `disabled`; afterwards it hands everything to the component made.
 * A component made at a reload starts under the running configuration and then reloads to the next, as one made
 * at start would have.
 */
import type { Config } from "../config/schema";
import type { Component, ComponentHost, ReadinessCheck } from "./component";

export interface LazyGroup {
  /** The ids of the components `load()`'s factory makes, in the order it returns them. */
  readonly ids: readonly string[];
  /** The readiness check they feed (all of them), if any: known before they are made. */
  readonly readiness?: ReadinessCheck;
  enabled(config: Config): boolean;
  load(): Promise<() => Component[]>;
}

/** One stand-in per id of `group`, sharing one load. */
export function lazyComponents(group: LazyGroup, config: () => Config): LazyComponent[] {
  let made: Promise<Component[]> | undefined;
  const make = (): Promise<Component[]> =>
    (made ??= group.load().then((factory) => {
      const components = factory();
      const ids = components.map((c) => c.id);
      if (ids.join() !== group.ids.join()) throw new Error(`components ${ids.join(", ")} made where ${group.ids.join(", ")} were declared`);
      for (const c of components)
        if (c.readiness !== group.readiness) throw new Error(`component ${c.id} feeds readiness ${c.readiness ?? "none"} where ${group.readiness ?? "none"} was declared`);
      return components;
    }));
  return group.ids.map((id, i) => new LazyComponent(id, group.readiness, (c) => group.enabled(c), async () => (await make())[i]!, config));
}

export class LazyComponent implements Component {
  readonly id: string;
  readonly readiness: ReadinessCheck | undefined;
  readonly #enabled: (config: Config) => boolean;
  readonly #make: () => Promise<Component>;
  readonly #config: () => Config;
  #host: ComponentHost | undefined;
  #inner: Component | undefined;

  constructor(id: string, readiness: ReadinessCheck | undefined, enabled: (config: Config) => boolean, make: () => Promise<Component>, config: () => Config) {
    this.id = id;
    this.readiness = readiness;
    this.#enabled = enabled;
    this.#make = make;
    this.#config = config;
  }

  /** The component made, once loaded. */
  get loaded(): Component | undefined {
    return this.#inner;
  }

  /** Loads and makes the component now if the running configuration turns it on (before any start, so that
   * what its constructor declares, e.g. metric series at 0, is there from the first scrape). */
  async prepare(): Promise<void> {
    if (!this.#inner && this.#enabled(this.#config())) this.#inner = await this.#make();
  }

  async start(host: ComponentHost): Promise<void> {
    this.#host = host;
    if (!this.#enabled(this.#config())) {
      host.report("disabled");
      return;
    }
    this.#inner ??= await this.#make();
    await this.#inner.start(host);
  }

  async shutdown(deadline: AbortSignal): Promise<void> {
    await this.#inner?.shutdown(deadline);
  }

  async reload(next: Config, previous: Config): Promise<void> {
    if (this.#inner) return this.#inner.reload?.(next, previous);
    if (!this.#host || !this.#enabled(next)) return;
    const inner = await this.#make();
    await inner.start(this.#host);
    this.#inner = inner;
    await inner.reload?.(next, previous);
  }
}
