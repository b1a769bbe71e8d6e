/** Schema of `agent.discovery`: the keys of every registered source (sources.ts), each owned by its folder's config.ts. */
import { Type, type Static } from "@sinclair/typebox";
import { composeKeys, validateParts } from "../config/compose";
import type { ConfigProblem } from "../config/problems";
import { SOURCES } from "./sources";

export const DiscoverySchema = Type.Object(composeKeys(SOURCES), { additionalProperties: false, default: {} });
export type DiscoveryConfig = Static<typeof DiscoverySchema>;

/** Cross-field rules of `agent.discovery`: each source's, in the order of the sources. */
export function validateDiscovery(d: DiscoveryConfig): ConfigProblem[] {
  return validateParts(SOURCES, d);
}
