/**
 * The collectors, in start order. A new collector: its folder (config.ts with its keys, rules and `enabled`,
 * importing configuration code only; index.ts with its factory), its entry here and its part in ./config.ts. An
 * entry names its code lazily: the agent loads a collector's folder once the configuration turns it on, at start
 * or at a reload (src/lifecycle/lazy.ts), so a collector that stays off is never loaded. The schema takes the
 * parts from ./config.ts, not from here: this file names the collectors' code, which reads the schema.
 */
import type { Config } from "../config/schema";
import type { Component, ReadinessCheck } from "../lifecycle/component";
import type { AgentContext } from "./context";
import { gpuConfig } from "./gpu/config";
import { logsConfig } from "./logs/config";
import { networkConfig } from "./network/config";
import { profilingConfig } from "./profiling/config";
import { syscallsConfig } from "./syscalls/config";

export const COLLECTORS: readonly CollectorEntry[] = [
  { part: profilingConfig, ids: ["collector/profiling"], load: () => import("./profiling").then((m) => (ctx) => [m.createProfilingCollector(ctx)]) },
  { part: gpuConfig, ids: ["collector/gpu"], load: () => import("./gpu").then((m) => (ctx) => [m.createGpuCollector(ctx)]) },
  { part: logsConfig, ids: ["collector/logs"], load: () => import("./logs").then((m) => (ctx) => [m.createLogsCollector(ctx)]) },
  { part: networkConfig, ids: ["ebpf/network", "ebpf/tls"], readiness: "ebpf", load: () => import("./network").then((m) => m.createNetworkCollectors) },
  { part: syscallsConfig, ids: ["ebpf/syscalls"], readiness: "ebpf", load: () => import("./syscalls").then((m) => m.createSyscallCollectors) },
];

/** One collector: its configuration part, its components' ids and its factory, loaded on first use. */
export interface CollectorEntry {
  /** Its part of the configuration (the one in COLLECTOR_CONFIG or EBPF_SET_CONFIG of ./config.ts). */
  readonly part: { enabled(agent: Config["agent"]): boolean };
  /** Its components' ids, in the order its factory returns them (each reports `disabled` while it is not loaded). */
  readonly ids: readonly string[];
  /** The readiness check its components feed, if any. */
  readonly readiness?: ReadinessCheck;
  load(): Promise<(ctx: AgentContext) => Component[]>;
}
