/**
 * The resource of every export: `service.name` (config `service_name`), `host.name`, `os.type`, then the
 * attributes contributed by sources (`setResourceAttributes`, e.g. discovery), then an item's own `resource`.
 * Encoded once per distinct combination and cached until something changes.
 */
import { hostname } from "node:os";
import { encodeResource, type ResourceEncoder } from "./encode";
import type { Attributes } from "./types";

/** OpenTelemetry semantic conventions' os.type values for the platforms Bun runs on. */
const OS_TYPES: Record<string, string> = { linux: "linux", darwin: "darwin", win32: "windows", freebsd: "freebsd" };

export class ResourceBuilder {
  readonly #sources = new Map<string, Attributes>();
  #serviceName: string;
  #merged: Attributes | undefined;
  #base: Uint8Array | undefined;
  #perExtra = new WeakMap<Attributes, Uint8Array>();

  constructor(serviceName: string) {
    this.#serviceName = serviceName;
  }

  setServiceName(name: string): void {
    if (name === this.#serviceName) return;
    this.#serviceName = name;
    this.#invalidate();
  }

  /** Replaces the attributes of `source` (an empty object removes them). */
  set(source: string, attributes: Attributes): void {
    if (Object.keys(attributes).length === 0) this.#sources.delete(source);
    else this.#sources.set(source, { ...attributes });
    this.#invalidate();
  }

  /** The agent's resource attributes now. */
  attributes(): Attributes {
    if (this.#merged) return this.#merged;
    const out: Attributes = {
      "service.name": this.#serviceName,
      "host.name": hostname(),
      "os.type": OS_TYPES[process.platform] ?? process.platform,
    };
    for (const source of [...this.#sources.keys()].sort()) Object.assign(out, this.#sources.get(source));
    this.#merged = out;
    return out;
  }

  /** Encoded Resource for items with `extra` attributes (cached by identity of `extra`). */
  readonly encoder: ResourceEncoder = (extra) => {
    if (!extra) return (this.#base ??= encodeResource(this.attributes()));
    let b = this.#perExtra.get(extra);
    if (!b) {
      b = encodeResource({ ...this.attributes(), ...extra });
      this.#perExtra.set(extra, b);
    }
    return b;
  };

  #invalidate(): void {
    this.#merged = undefined;
    this.#base = undefined;
    this.#perExtra = new WeakMap();
  }
}
