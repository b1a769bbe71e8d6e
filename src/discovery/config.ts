/** Schema of `agent.discovery`: the keys of every registered source (sources.ts), each owned by its folder's config.ts. */
import { Type, type Static } from "@sinclair/typebox";
import type { ConfigProblem } from "../config/problems";
import type { UnionToIntersection } from "./plugin";
import { SOURCES, type RegisteredSource } from "./sources";

type DiscoveryKeys = UnionToIntersection<RegisteredSource["config"]>;

export const DiscoverySchema = Type.Object(Object.assign({}, ...SOURCES.map((s) => s.config)) as DiscoveryKeys, { additionalProperties: false, default: {} });
export type DiscoveryConfig = Static<typeof DiscoverySchema>;

/** Cross-field rules of `agent.discovery`: each source's, in the order of the sources. */
export function validateDiscovery(d: DiscoveryConfig): ConfigProblem[] {
  return SOURCES.flatMap((s) => s.validate(d as never));
}
