/**
 * The collectors, in start order and in the order of their keys in the configuration reference. A new
 * collector: its folder (config.ts with its part: keys, rules and `enabled`, importing configuration code only;
 * index.ts with its factory) and its entry here. An entry names its code lazily: the agent loads a collector's
 * folder once the configuration turns it on, at start or at a reload (src/lifecycle/lazy.ts), so a collector
 * that stays off is never loaded. The whole document (src/config/document.ts) takes the collectors' keys from
 * here; the collectors' code reads the core's `Config` (src/config/schema.ts), which does not name them.
 */
import type { Config } from "../config/schema";
import { composeKeys, validateParts, type ConfigPart } from "../config/compose";
import type { ConfigProblem } from "../config/problems";
import type { Component, ReadinessCheck } from "../lifecycle/component";
import type { AgentContext } from "./context";
import { gpuConfig } from "./gpu/config";
import { logsConfig } from "./logs/config";
import { networkConfig } from "./network/config";
import { profilingConfig } from "./profiling/config";
import { syscallsConfig } from "./syscalls/config";

const ENTRIES = [
  { part: profilingConfig, ids: ["collector/profiling"], load: () => import("./profiling").then((m) => (ctx) => [m.createProfilingCollector(ctx)]) },
  { part: gpuConfig, ids: ["collector/gpu"], load: () => import("./gpu").then((m) => (ctx) => [m.createGpuCollector(ctx)]) },
  { part: logsConfig, ids: ["collector/logs"], load: () => import("./logs").then((m) => (ctx) => [m.createLogsCollector(ctx)]) },
  { set: networkConfig, ids: ["ebpf/network", "ebpf/tls"], readiness: "ebpf", load: () => import("./network").then((m) => m.createNetworkCollectors) },
  { set: syscallsConfig, ids: ["ebpf/syscalls"], readiness: "ebpf", load: () => import("./syscalls").then((m) => m.createSyscallCollectors) },
] as const satisfies readonly CollectorEntry[];

export const COLLECTORS: readonly CollectorEntry[] = ENTRIES;

/** A collector's configuration part: its keys and rules, and whether a configuration turns it on. */
export interface CollectorPart extends ConfigPart {
  enabled(config: Config): boolean;
}

/** One collector: its configuration part, its components' ids and its factory, loaded on first use. */
export type CollectorEntry = (
  | {
      /** Its part, keys of `agent`. */
      readonly part: CollectorPart;
    }
  | {
      /** Its part, keys of `agent.ebpf`: an eBPF program set's. */
      readonly set: CollectorPart;
    }
) & {
  /** Its components' ids, in the order its factory returns them (each reports `disabled` while it is not loaded). */
  readonly ids: readonly string[];
  /** The readiness check its components feed, if any. */
  readonly readiness?: ReadinessCheck;
  load(): Promise<(ctx: AgentContext) => Component[]>;
};

type Entry = (typeof ENTRIES)[number];
type AgentParts = Extract<Entry, { part: unknown }>["part"];
type SetParts = Extract<Entry, { set: unknown }>["set"];

const AGENT_PARTS: readonly AgentParts[] = ENTRIES.flatMap((e) => ("part" in e ? [e.part] : []));
const SET_PARTS: readonly SetParts[] = ENTRIES.flatMap((e) => ("set" in e ? [e.set] : []));

/** A collector's part, whichever section its keys are in. */
export const partOf = (e: CollectorEntry): CollectorPart => ("part" in e ? e.part : e.set);

/** Every collector's keys of `agent`. */
export const CollectorKeys = composeKeys(AGENT_PARTS);

/** Every program set's keys of `agent.ebpf`. */
export const EbpfSetKeys = composeKeys(SET_PARTS);

/** Cross-field rules of the collector sections (paths under `agent.`), each collector's in turn, the program sets' last. */
export function validateCollectors(agent: { ebpf: object }): ConfigProblem[] {
  return [...validateParts(AGENT_PARTS, agent), ...validateParts(SET_PARTS, agent.ebpf)];
}
