/**
 * Components whose code is loaded on first use: a group of components (one collector's) made by a factory that
 * `load()` brings in, once, when `enabled(config)` first holds, at start or at a reload that turns it on. Until
 * then each stands in with its id and reports `disabled`; afterwards it hands everything to the component made.
 * A component made at a reload starts under the running configuration and then reloads to the next, as one made
 * at start would have.
 */
import type { Config } from "../config/schema";
import type { Component, ComponentHost } from "./component";

export interface LazyGroup {
  /** The ids of the components `load()`'s factory makes, in the order it returns them. */
  readonly ids: readonly string[];
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
      return components;
    }));
  return group.ids.map((id, i) => new LazyComponent(id, (c) => group.enabled(c), async () => (await make())[i]!, config));
}

export class LazyComponent implements Component {
  readonly id: string;
  readonly #enabled: (config: Config) => boolean;
  readonly #make: () => Promise<Component>;
  readonly #config: () => Config;
  #host: ComponentHost | undefined;
  #inner: Component | undefined;

  constructor(id: string, enabled: (config: Config) => boolean, make: () => Promise<Component>, config: () => Config) {
    this.id = id;
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
