/**
 * The collectors' keys: those of `agent` (COLLECTOR_CONFIG, in the order of the configuration reference) and those
 * of `agent.ebpf`, the program sets' (EBPF_SET_CONFIG, after the loader's keys), each owned by its folder's
 * config.ts. A collector's entry in ./registry.ts, which names its code (loaded on demand), cannot be read from
 * here: the schema would then reach the code that reads the schema.
 */
import { composeKeys, validateParts } from "../config/compose";
import type { ConfigProblem } from "../config/problems";
import { gpuConfig } from "./gpu/config";
import { logsConfig } from "./logs/config";
import { networkConfig } from "./network/config";
import { profilingConfig } from "./profiling/config";
import { syscallsConfig } from "./syscalls/config";

export const COLLECTOR_CONFIG = [profilingConfig, gpuConfig, logsConfig] as const;
export const EBPF_SET_CONFIG = [networkConfig, syscallsConfig] as const;

/** Every collector's keys of `agent`. */
export const CollectorKeys = composeKeys(COLLECTOR_CONFIG);

/** Every program set's keys of `agent.ebpf`. */
export const EbpfSetKeys = composeKeys(EBPF_SET_CONFIG);

/** Cross-field rules of the collector sections (paths under `agent.`), each collector's in turn, the program sets' last. */
export function validateCollectors(agent: { ebpf: object }): ConfigProblem[] {
  return [...validateParts(COLLECTOR_CONFIG, agent), ...validateParts(EBPF_SET_CONFIG, agent.ebpf)];
}
