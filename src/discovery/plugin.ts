/**
 * What a discovery source declares in its own folder (`<source>/index.ts`), registered by one entry in
 * sources.ts: its keys of `agent.discovery` and their rules, its part of the `discovery` status view (schema,
 * the part shown while discovery publishes nothing, the live part), its fields of GET /status, and how it is
 * built. config.ts, status.ts, view.ts and index.ts compose every registered source; none names one.
 */
import type { Static, TObject, TProperties, TSchema } from "@sinclair/typebox";
import type { ConfigProblem } from "../config/problems";
import type { TelemetryPipeline } from "../export/types";
import type { ComponentHost } from "../lifecycle/host";
import type { ReadinessCheck } from "../status/state";
import type { TaskRegistry } from "../telemetry/tasks";
import type { ContainerDirectory } from "./directory";

/** One item of discovered_services (DiscoveredServiceSchema). */
export interface DiscoveredService {
  /** Service name, compose service, or image name. */
  name: string;
  /** Kubernetes namespace, compose project, or "docker". */
  namespace: string;
  /** Ready pods on this node matching the selector, or running containers of the group. */
  instances: number;
  /** Service ports, or published host ports; sorted, unique. */
  ports: number[];
}

/** The order of discovered_services: by namespace, then name. */
export const byNamespaceThenName = (a: DiscoveredService, b: DiscoveredService) => a.namespace.localeCompare(b.namespace) || a.name.localeCompare(b.name);

/** What a source may use besides its configuration. */
export interface SourceDeps {
  env: Record<string, string | undefined>;
  tasks: TaskRegistry;
  /** Where it publishes resource attributes (host, cloud, cluster). */
  pipeline: TelemetryPipeline;
  /** Where it records what it learns of containers and pods. */
  directory: ContainerDirectory;
}

/** A built source: a component (readiness `discovery`; its reload reads its keys of `agent.discovery`). */
export interface SourceComponent {
  readonly id: string;
  readonly readiness: ReadinessCheck;
  start(host: ComponentHost): Promise<void>;
  shutdown(): Promise<void>;
}

/** discovered_services as one source has them now; `stamp` changes whenever the list would. */
export interface ServiceList {
  stamp: string;
  list(): DiscoveredService[];
}

export interface SourcePlugin<K extends string = string, C extends TProperties = TProperties, V extends TSchema = TSchema, Src extends SourceComponent = SourceComponent> {
  /** The key of its part of the view (and usually of its configuration). */
  key: K;
  /** Its keys of `agent.discovery`, in the order of the configuration reference. */
  config: C;
  /** Cross-field rules of its keys (paths in full: `agent.discovery.<key>...`). */
  validate(d: Static<TObject<C>>): ConfigProblem[];
  /** Started before the sources without it (its resource attributes go on every export). */
  startsFirst?: boolean;
  /** Its part of the view, under `key`. */
  view: V;
  /** That part while discovery publishes no view: configured and zero figures. */
  disabled(d: Static<TObject<C>>): Static<V>;
  create(d: Static<TObject<C>>, deps: SourceDeps): Src;
  /** That part now. */
  viewOf(source: Src): Static<V>;
  /** Its fields of GET /status, when it has some: `<key>` (active and connected) and counts. */
  summary?: {
    active: { ofView(v: Static<V>): boolean; ofSource(source: Src): boolean };
    counts: Record<string, { ofView(v: Static<V>): number; ofSource(source: Src): number }>;
  };
  /** discovered_services, when this source has the say now (the first registered source that has it wins). */
  services?(source: Src): ServiceList | undefined;
}

/** Declares a source, keeping its exact types for the composed schemas. */
export function defineSource<K extends string, C extends TProperties, V extends TSchema, Src extends SourceComponent>(p: SourcePlugin<K, C, V, Src>): SourcePlugin<K, C, V, Src> {
  return p;
}
