/**
 * In-process discovery for tests and benchmarks: createDiscovery() and the workload registry over its directory,
 * with a configuration from YAML text,
 * a recording pipeline (resource attributes per source), a status aggregator and a supervisor, without the
 * rest of the agent.
 */
import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfig } from "../../src/config/load";
import type { Config } from "../../src/config/schema";
import { createDiscovery, type BuiltSources, type DiscoveryParts } from "../../src/discovery";
import type { DirectoryOptions } from "../../src/discovery/directory";
import type { Attributes, TelemetryPipeline } from "../../src/export/types";
import { Supervisor } from "../../src/lifecycle/supervisor";
import { Logger, type LogRecord } from "../../src/log/logger";
import { StatusAggregator } from "../../src/status/aggregator";
import type { DiscoveryView } from "../../src/discovery/status";
import { AgentMetrics } from "../../src/telemetry/metrics";
import { TaskRegistry } from "../../src/telemetry/tasks";
import { WorkloadRegistry } from "../../src/workloads/registry";

export interface DiscoveryHarness {
  /** The discovery parts plus the workload registry built over their directory (as the agent builds it). */
  /** The subsystem, each built source by its key (`parts.docker`...) and the workload registry. */
  parts: DiscoveryParts & BuiltSources & { workloads: WorkloadRegistry };
  status: StatusAggregator;
  supervisor: Supervisor;
  /** Resource attributes set per source (the last call wins, as in the pipeline). */
  resources: Map<string, Attributes>;
  logs: LogRecord[];
  config: Config;
  view(): DiscoveryView;
  start(): Promise<void>;
  /** Re-parses YAML and applies it through the supervisor's reload (throws when a component refuses). */
  reload(yaml: string): Promise<void>;
  stop(): Promise<void>;
}

export function discoveryHarness(yaml: string, env: Record<string, string | undefined> = {}, options: DirectoryOptions & { selfPid?: number } = {}): DiscoveryHarness {
  let config = parseConfig(yaml, env);
  const logs: LogRecord[] = [];
  const logger = new Logger({ sink: (line) => logs.push(JSON.parse(line) as LogRecord), level: "debug" });
  const status = new StatusAggregator();
  const tasks = new TaskRegistry();
  const resources = new Map<string, Attributes>();
  const pipeline: TelemetryPipeline = {
    submit: () => 0,
    flush: async () => {
      const none = { traces: 0, metrics: 0, logs: 0, profiles: 0 };
      return { exported: none, dropped: none, remaining: none };
    },
    setResourceAttributes: (source, attributes) => resources.set(source, { ...attributes }),
  };
  const ctx = {
    get config() {
      return config;
    },
    logger,
    status,
    metrics: new AgentMetrics("svc", tasks),
    tasks,
    env,
    pipeline,
  };
  const discovery = createDiscovery(ctx, options);
  const parts = { ...discovery, ...discovery.sources, workloads: new WorkloadRegistry(discovery.directory, { procRoot: options.procRoot, selfPid: options.selfPid, now: options.now }) };
  const supervisor = new Supervisor(logger, status);
  for (const c of parts.components) supervisor.add(c);
  return {
    parts,
    status,
    supervisor,
    resources,
    logs,
    get config() {
      return config;
    },
    view: () => status.view<DiscoveryView>("discovery")!,
    start: () => supervisor.startAll(),
    reload: async (text) => {
      const next = parseConfig(text, env);
      await supervisor.applyReload(next, config);
      config = next;
    },
    stop: () => supervisor.shutdownAll(5_000),
  };
}

/** Polls `probe` until it returns something other than undefined/false; throws after `timeoutMs`. */
export async function until<T>(what: string, probe: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}`);
    await Bun.sleep(20);
  }
}

const tempDirs: string[] = [];

/** A new temporary directory, removed by removeTempDirs(). */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

/** Removes every directory made by tempDir() (and any extra paths given); call from afterAll. */
export function removeTempDirs(...extra: string[]): void {
  for (const d of [...tempDirs.splice(0), ...extra]) rmSync(d, { recursive: true, force: true });
}

/** Writes a service account token as the kubelet does: aside, then swapped in atomically. */
export function writeToken(dir: string, token: string): void {
  writeFileSync(join(dir, "token.new"), token);
  renameSync(join(dir, "token.new"), join(dir, "token"));
}

/** An in-cluster service account directory (token, ca.crt, namespace) for an API server with certificate `caPem`. */
export function serviceAccountDir(caPem: string, token: string, namespace = "monitoring"): string {
  const dir = tempDir("svc-sa-");
  writeToken(dir, token);
  writeFileSync(join(dir, "ca.crt"), caPem);
  writeFileSync(join(dir, "namespace"), `${namespace}\n`);
  return dir;
}

/** Configuration with only Kubernetes discovery on (in-cluster, through `saDir`), watching node `node`. */
export function kubernetesOnlyYaml(node: string, saDir: string, extraKubernetes = ""): string {
  return `
agent:
  discovery:
    detect_kubernetes: true
    kubernetes:
      node_name: ${node}
      cluster_name: test-cluster
      service_account_dir: ${saDir}
${extraKubernetes}    docker:
      enabled: false
    cloud:
      enabled: false
`;
}
