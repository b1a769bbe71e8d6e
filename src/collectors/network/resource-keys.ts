import type { Attributes } from "../../export/types";

/** A small number per workload resource object, for series keys (0: no resource). */
export class ResourceKeys {
  readonly #keys = new WeakMap<Attributes, number>();
  #next = 1;

  of(resource: Attributes | undefined): number {
    if (!resource) return 0;
    let k = this.#keys.get(resource);
    if (k === undefined) this.#keys.set(resource, (k = this.#next++));
    return k;
  }
}
