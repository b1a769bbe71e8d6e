/**
 * The collectors' keys of `agent` (beside `agent.ebpf`, whose program sets `network` and `syscalls` the eBPF
 * core's schema holds), each owned by its folder's config.ts: a collector with keys of its own has its part in
 * COLLECTOR_CONFIG, in the order of the configuration reference. Its entry in ./registry.ts, which names its code
 * (loaded on demand), cannot be read from here: the schema would then reach the code that reads the schema.
 */
import { composeKeys, validateParts } from "../config/compose";
import type { ConfigProblem } from "../config/problems";
import { gpuConfig } from "./gpu/config";
import { logsConfig } from "./logs/config";
import { profilingConfig } from "./profiling/config";

const COLLECTOR_CONFIG = [profilingConfig, gpuConfig, logsConfig] as const;

/** Every collector's keys of `agent`. */
export const CollectorKeys = composeKeys(COLLECTOR_CONFIG);

/** Cross-field rules of the collector sections (paths under `agent.`), each collector's in turn. */
export function validateCollectors(c: object): ConfigProblem[] {
  return validateParts(COLLECTOR_CONFIG, c);
}
