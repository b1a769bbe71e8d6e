/**
 * The discovery sources, in the order of their keys in `agent.discovery`, of their parts of the view and of
 * their fields in GET /status. A new source: its folder (config.ts, source.ts, index.ts with defineSource)
 * and its entry here.
 */
import { cloud } from "./cloud";
import { docker } from "./docker";
import { kubernetes } from "./kubernetes";

export const SOURCES = [kubernetes, docker, cloud] as const;

export type RegisteredSource = (typeof SOURCES)[number];
