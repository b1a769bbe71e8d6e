/**
 * `discovery/kubernetes`: lists and watches this node's pods (fieldSelector spec.nodeName) and the
 * cluster's services, maps each pod's container ids to k8s.* attributes in the workload directory, and
 * publishes k8s.node.name / k8s.cluster.name as resource attributes (source "discovery/kubernetes").
 * Active when detect_kubernetes is on and either a kubeconfig is configured or the in-cluster
 * environment is present; otherwise `disabled`.
 */
import { hostname } from "node:os";
import { msOf } from "../../config/units";
import type { Attributes, TelemetryPipeline } from "../../export/types";
import type { ComponentHost } from "../../lifecycle/host";
import { DiscoverySource, type SourceRun } from "../source";
import type { TaskRegistry } from "../../telemetry/tasks";
import { Backoff, errorText } from "../backoff";
import type { ContainerDirectory } from "../directory";
import type { KubernetesConfig } from "./config";
import { KubeApiClient } from "./api-client";
import { inClusterAvailable, inClusterConnection, kubeconfigConnection, type KubeConnection } from "./connection";
import { ListWatcher, INITIAL_BACKOFF_MS } from "./list-watch";
import { objectKey, podContainerEntries, trimPod, trimService, type Pod, type Service } from "./pods";

export const KUBERNETES_COMPONENT_ID = "discovery/kubernetes";

/** What the view needs of Kubernetes discovery; the maps are live (read them synchronously, do not keep them). */
export interface KubernetesSnapshot {
  /** Configured to run: a kubeconfig is given or the in-cluster environment is present. */
  enabled: boolean;
  /** Pods and services are listed and their watches are healthy. */
  connected: boolean;
  /** cluster_name, else the kubeconfig's cluster name, else empty. */
  cluster: string;
  /** The agent's own namespace. */
  namespace: string;
  /** The node whose pods are watched. */
  nodeName: string;
  /** This node's pods by `namespace/name`. */
  pods: ReadonlyMap<string, Pod>;
  /** All services by `namespace/name`. */
  services: ReadonlyMap<string, Service>;
}

interface Settings {
  detect: boolean;
  kubeconfig: string;
  clusterName: string;
  nodeName: string;
  serviceAccountDir: string;
  backoffMaxMs: number;
}

function settingsOf(c: KubernetesConfig, env: Record<string, string | undefined>): Settings {
  const k = c.kubernetes;
  return {
    detect: c.detect_kubernetes,
    kubeconfig: k.kubeconfig,
    clusterName: k.cluster_name,
    nodeName: k.node_name || env.NODE_NAME || hostname(),
    serviceAccountDir: k.service_account_dir,
    backoffMaxMs: msOf(k, "resync_backoff_max"),
  };
}


export class KubernetesSource extends DiscoverySource<Settings, KubernetesConfig> {
  readonly id = KUBERNETES_COMPONENT_ID;
  #connection: KubeConnection | undefined;
  #pods = new Map<string, Pod>();
  #podContainers = new Map<string, string[]>();
  #services = new Map<string, Service>();
  #errors = { pods: undefined as string | undefined, services: undefined as string | undefined };
  #watchers: ListWatcher<Pod | Service>[] = [];
  #connected = false;
  /** Configured to run (a kubeconfig is given or the in-cluster environment is present), even when failing. */
  #active = false;
  /** Bumped on every change of pods or services (the view caches derived data by it). */
  generation = 0;

  constructor(
    config: KubernetesConfig,
    readonly env: Record<string, string | undefined>,
    readonly directory: ContainerDirectory,
    readonly pipeline: TelemetryPipeline,
    readonly tasks: TaskRegistry,
  ) {
    super(settingsOf(config, env));
  }

  snapshot(): KubernetesSnapshot {
    const c = this.#connection;
    return {
      enabled: this.#active,
      connected: this.#connected,
      cluster: this.settings.clusterName || c?.clusterName || "",
      namespace: c?.namespace ?? "",
      nodeName: this.settings.nodeName,
      pods: this.#pods,
      services: this.#services,
    };
  }

  /** snapshot().enabled. */
  get enabled(): boolean {
    return this.#active;
  }

  /** snapshot().connected. */
  get connected(): boolean {
    return this.#connected;
  }

  /** snapshot().pods.size. */
  get podCount(): number {
    return this.#pods.size;
  }

  /** List/watch counters per resource (tests, debug). */
  stats(): Record<string, { lists: number; watches: number; gone: number; bookmarks: number; resourceVersion: string }> {
    const out: Record<string, { lists: number; watches: number; gone: number; bookmarks: number; resourceVersion: string }> = {};
    for (const w of this.#watchers) out[w.path] = { ...w.stats, resourceVersion: w.resourceVersion };
    return out;
  }

  protected readSettings(next: KubernetesConfig): Settings {
    const s = settingsOf(next, this.env);
    // A kubeconfig that cannot be read refuses the reload (nothing changes).
    if (s.kubeconfig && s.detect) kubeconfigConnection(s.kubeconfig);
    return s;
  }

  protected begin(host: ComponentHost): SourceRun | undefined {
    const s = this.settings;
    if (!s.detect) {
      host.report("disabled");
      return undefined;
    }
    let connection: KubeConnection;
    this.#active = Boolean(s.kubeconfig) || inClusterAvailable(this.env, s.serviceAccountDir);
    try {
      if (s.kubeconfig) connection = kubeconfigConnection(s.kubeconfig);
      else if (inClusterAvailable(this.env, s.serviceAccountDir)) connection = inClusterConnection(this.env, s.serviceAccountDir);
      else {
        host.logger.debug("kubernetes discovery off: no in-cluster environment and no kubeconfig");
        host.report("disabled");
        return undefined;
      }
    } catch (e) {
      host.report("permanent_error", errorText(e));
      return undefined;
    }
    this.#connection = connection;
    const cluster = s.clusterName || connection.clusterName;
    const resource: Attributes = { "k8s.node.name": s.nodeName };
    if (cluster) resource["k8s.cluster.name"] = cluster;
    this.pipeline.setResourceAttributes(KUBERNETES_COMPONENT_ID, resource);
    host.report("starting");
    host.logger.info("kubernetes discovery starting", { mode: connection.mode, server: connection.server, node: s.nodeName, namespace: connection.namespace });
    const client = new KubeApiClient(connection);
    const track = (name: string, fn: () => Promise<void>) => this.tasks.track(`${KUBERNETES_COMPONENT_ID} ${name}`, fn);
    const pods = new ListWatcher<Pod>(client, "/api/v1/pods", { fieldSelector: `spec.nodeName=${s.nodeName}` }, this.#podHandlers(host, cluster), new Backoff(INITIAL_BACKOFF_MS, s.backoffMaxMs), track);
    const services = new ListWatcher<Service>(client, "/api/v1/services", {}, this.#serviceHandlers(host), new Backoff(INITIAL_BACKOFF_MS, s.backoffMaxMs), track);
    this.#watchers = [pods as ListWatcher<Pod | Service>, services as ListWatcher<Pod | Service>];
    const abort = new AbortController();
    const endPods = this.tasks.begin(`${KUBERNETES_COMPONENT_ID} watch pods`);
    const endServices = this.tasks.begin(`${KUBERNETES_COMPONENT_ID} watch services`);
    const done = Promise.all([pods.run(abort.signal).finally(endPods), services.run(abort.signal).finally(endServices)]).then(() => undefined);
    return { abort, done };
  }

  protected forget(): void {
    if (this.#connection) this.pipeline.setResourceAttributes(KUBERNETES_COMPONENT_ID, {});
    this.#connection = undefined;
    this.#active = false;
    this.#connected = false;
    this.#watchers = [];
    this.#errors = { pods: undefined, services: undefined };
    this.#pods = new Map();
    this.#podContainers = new Map();
    this.#services = new Map();
    this.generation++;
    this.directory.clear("kubernetes");
  }

  #updateState(host: ComponentHost, which: "pods" | "services", error: string | undefined): void {
    const was = this.#connected;
    this.#errors[which] = error;
    const failing = this.#errors.pods ?? this.#errors.services;
    const synced = this.#watchers.every((w) => w.synced);
    this.#connected = !failing && synced;
    if (failing) host.report("recoverable_error", failing);
    else if (synced) host.report("ok");
    if (was && !this.#connected && failing) host.logger.warn("kubernetes API connection lost; retrying", { reason: failing });
  }

  #podHandlers(host: ComponentHost, cluster: string) {
    const node = this.settings.nodeName;
    const onNode = (p: Pod) => (p as { spec?: { nodeName?: string } }).spec?.nodeName === node;
    const removePod = (key: string) => {
      for (const id of this.#podContainers.get(key) ?? []) this.directory.remove("kubernetes", id);
      this.#podContainers.delete(key);
      this.#pods.delete(key);
    };
    return {
      replace: (items: Pod[]) => {
        const pods = new Map<string, Pod>();
        const podContainers = new Map<string, string[]>();
        const entries = [];
        for (const p of items) {
          if (!onNode(p)) continue;
          const key = objectKey(p);
          const es = podContainerEntries(p, cluster);
          pods.set(key, trimPod(p));
          podContainers.set(key, es.map((e) => e.id));
          entries.push(...es);
        }
        this.#pods = pods;
        this.#podContainers = podContainers;
        this.directory.replace("kubernetes", entries);
        this.generation++;
      },
      upsert: (p: Pod) => {
        const key = objectKey(p);
        if (!onNode(p)) {
          removePod(key);
          this.generation++;
          return;
        }
        const es = podContainerEntries(p, cluster);
        const ids = new Set(es.map((e) => e.id));
        for (const old of this.#podContainers.get(key) ?? []) if (!ids.has(old)) this.directory.remove("kubernetes", old);
        for (const e of es) this.directory.set("kubernetes", e);
        this.#pods.set(key, trimPod(p));
        this.#podContainers.set(key, [...ids]);
        this.generation++;
      },
      remove: (p: Pod) => {
        removePod(objectKey(p));
        this.generation++;
      },
      state: (error: string | undefined) => this.#updateState(host, "pods", error),
    };
  }

  #serviceHandlers(host: ComponentHost) {
    return {
      replace: (items: Service[]) => {
        this.#services = new Map(items.map((s) => [objectKey(s), trimService(s)]));
        this.generation++;
      },
      upsert: (s: Service) => {
        this.#services.set(objectKey(s), trimService(s));
        this.generation++;
      },
      remove: (s: Service) => {
        this.#services.delete(objectKey(s));
        this.generation++;
      },
      state: (error: string | undefined) => this.#updateState(host, "services", error),
    };
  }
}
