/**
 * The shape every status view shares. Each subsystem owns its view: the schema (field for field as the
 * self-telemetry spec lists it), the view it shows when it publishes none, and its fields of GET /status, in a
 * `StatusSection` beside its code (src/ebpf/status.ts, src/export/status.ts, src/discovery/status.ts, ...).
 * Subsystems publish views with `StatusAggregator.provide(name, view, summary)`; the HTTP routes validate and
 * document their answers with the same schemas.
 */
import { Type, type Static } from "@sinclair/typebox";

export const Timestamp = (description: string) => Type.String({ format: "date-time", description });
export const Count = (description: string) => Type.Integer({ minimum: 0, description });


/** What a subsystem declares about its status view. `C` is the configuration the disabled view reads. */
export interface StatusSection<V, S, C = unknown> {
  /** The name the view is published under (`provide(name, ...)`), its /status/<name> path and its key in GET /status. */
  readonly name: string;
  /** The view while the subsystem publishes none (disabled, stopped): zero and configured figures, never invented ones. */
  disabled(config: C): V;
  /** Its fields of GET /status from a full view (when the subsystem publishes no summary of its own). */
  summary(view: V): S;
}
