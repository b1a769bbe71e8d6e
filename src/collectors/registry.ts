/**
 * The collectors, in start order and in the order of their keys in the configuration reference. A new collector:
 * its folder (config.ts with its keys, rules and `enabled`, importing config code only; index.ts with its factory)
 * and its entry here. An entry carries its configuration part statically (the schema composes it, see config.ts)
 * and its code lazily: the agent loads a collector's folder when the configuration first turns it on (see
 * src/lifecycle/lazy.ts), so a collector that stays off is never loaded.
 */
import type { Component } from "../lifecycle/component";
import type { AgentContext } from "./context";
import { gpuConfig } from "./gpu/config";
import { logsConfig } from "./logs/config";
import { networkConfig } from "./network/config";
import { profilingConfig } from "./profiling/config";
import { syscallsConfig } from "./syscalls/config";

export const COLLECTORS = [
  collector(profilingConfig, ["collector/profiling"], (): Loading => import("./profiling").then((m) => (ctx) => [m.createProfilingCollector(ctx)])),
  collector(gpuConfig, ["collector/gpu"], (): Loading => import("./gpu").then((m) => (ctx) => [m.createGpuCollector(ctx)])),
  collector(logsConfig, ["collector/logs"], (): Loading => import("./logs").then((m) => (ctx) => [m.createLogsCollector(ctx)])),
  collector(networkConfig, ["ebpf/network", "ebpf/tls"], (): Loading => import("./network").then((m) => m.createNetworkCollectors)),
  collector(syscallsConfig, ["ebpf/syscalls"], (): Loading => import("./syscalls").then((m) => m.createSyscallCollectors)),
] as const;

/** A collector's factory, its folder loaded. */
type Loading = Promise<(ctx: AgentContext) => Component[]>;

/** One collector: its configuration part, its components' ids and its factory, loaded on first use. */
export interface CollectorEntry<P extends CollectorConfigPart = CollectorConfigPart> {
  readonly part: P;
  /** Its components' ids, in the order its factory returns them (each reports `disabled` while it is not loaded). */
  readonly ids: readonly string[];
  load(): Loading;
}

/** An entry; its type follows from its part alone (the schema's type must not depend on the collector's code). */
function collector<P extends CollectorConfigPart>(part: P, ids: readonly string[], load: CollectorEntry["load"]): CollectorEntry<P> {
  return { part, ids, load };
}

/** A collector's keys of `agent` and their rules (ConfigPart), and whether a configuration turns it on. */
export interface CollectorConfigPart {
  config: object;
  validate(agent: never): unknown[];
  enabled(agent: never): boolean;
}
