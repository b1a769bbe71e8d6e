/**
 * The resources of exports, in two layers:
 * - the host layer, shared by everything: `host.name`, `os.type`, then the attributes contributed by sources
 *   (`setResourceAttributes`: discovery's cloud.*, host.*, k8s.node.name, k8s.cluster.name);
 * - on top of it, either the agent's own identity (items without `resource`: self-tracing and anything else about
 *   the agent itself): `service.name` (config `service_name`), `telemetry.sdk.*` and config `resource_attributes`; or the workload an item is
 *   about (its `resource`, e.g. from src/workloads), which never inherits the agent's service.name or SDK
 *   (`service.name` is `unknown_service` when the workload's attributes have none).
 * Encoded once per distinct combination and cached until something changes.
 */
import { hostname } from "node:os";
import { BUILD_INFO } from "../version";
import { encodeResource, type ResourceEncoder } from "./encode";
import type { Attributes } from "./types";

/** OpenTelemetry semantic conventions' os.type values for the platforms Bun runs on. */
const OS_TYPES: Record<string, string> = { linux: "linux", darwin: "darwin", win32: "windows", freebsd: "freebsd" };
/** telemetry.sdk.* of the agent's own telemetry (the SDK is the agent: JavaScript on Bun). */
export const AGENT_SDK: Attributes = Object.freeze({ "telemetry.sdk.name": "svc-agent", "telemetry.sdk.language": "nodejs", "telemetry.sdk.version": BUILD_INFO.version }) as Attributes;
/** service.name of a workload resource that names none (the OpenTelemetry default). */
const UNKNOWN_SERVICE = "unknown_service";

export class ResourceBuilder {
  readonly #sources = new Map<string, Attributes>();
  #serviceName: string;
  /** Config `resource_attributes` (OTEL_RESOURCE_ATTRIBUTES): the agent's own resource only. */
  #own: Attributes = {};
  #host: Attributes | undefined;
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

  /** Replaces the attributes of the agent's own resource (config `resource_attributes`); never on a workload's. */
  setOwnAttributes(attributes: Attributes): void {
    if (JSON.stringify(attributes) === JSON.stringify(this.#own)) return;
    this.#own = { ...attributes };
    this.#invalidate();
  }

  /** Replaces the attributes of `source` (an empty object removes them). */
  set(source: string, attributes: Attributes): void {
    if (Object.keys(attributes).length === 0) this.#sources.delete(source);
    else this.#sources.set(source, { ...attributes });
    this.#invalidate();
  }

  /** The host layer now: host.name, os.type and the sources' attributes. */
  hostAttributes(): Attributes {
    if (this.#host) return this.#host;
    const out: Attributes = { "host.name": hostname(), "os.type": OS_TYPES[process.platform] ?? process.platform };
    for (const source of [...this.#sources.keys()].sort()) Object.assign(out, this.#sources.get(source));
    this.#host = out;
    return out;
  }

  /** The agent's own resource attributes now. */
  attributes(): Attributes {
    if (this.#merged) return this.#merged;
    const merged: Attributes = { "service.name": this.#serviceName, ...AGENT_SDK, ...this.hostAttributes(), ...this.#own };
    merged["service.name"] = this.#serviceName;
    this.#merged = merged;
    return merged;
  }

  /** The resource attributes of items about a workload described by `workload`. */
  workloadAttributes(workload: Attributes): Attributes {
    const out: Attributes = { ...this.hostAttributes(), ...workload };
    if (typeof out["service.name"] !== "string" || out["service.name"] === "") out["service.name"] = UNKNOWN_SERVICE;
    return out;
  }

  /** Encoded Resource: the agent's own without `extra`, else the workload `extra` over the host layer (cached by identity of `extra`). */
  readonly encoder: ResourceEncoder = (extra) => {
    if (!extra) return (this.#base ??= encodeResource(this.attributes()));
    let b = this.#perExtra.get(extra);
    if (!b) {
      b = encodeResource(this.workloadAttributes(extra));
      this.#perExtra.set(extra, b);
    }
    return b;
  };

  #invalidate(): void {
    this.#host = undefined;
    this.#merged = undefined;
    this.#base = undefined;
    this.#perExtra = new WeakMap();
  }
}
