/**
 * Composing configuration keys that subsystems' folders own: each part declares its keys (in the order of the
 * configuration reference) and their cross-field rules; a section takes every registered part's keys.
 */
import type { Static, TObject, TProperties } from "@sinclair/typebox";
import type { ConfigProblem } from "./problems";

/** Keys of a section owned by one folder, and their rules (paths in full). */
export interface ConfigPart<C extends TProperties = TProperties> {
  config: C;
  validate(c: Static<TObject<C>>): ConfigProblem[];
}

/** `A | B` -> `A & B`. */
export type UnionToIntersection<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer I) => void ? I : never;

/** Every part's keys, in the order of the parts. */
export function composeKeys<L extends readonly ConfigPart[]>(parts: L): UnionToIntersection<L[number]["config"]> {
  return Object.assign({}, ...parts.map((p) => p.config)) as UnionToIntersection<L[number]["config"]>;
}

/** Every part's rules over `c`, in the order of the parts. */
export function validateParts(parts: readonly ConfigPart[], c: object): ConfigProblem[] {
  return parts.flatMap((p) => p.validate(c as never));
}

/**
 * A part's keys in the section they are composed into (`agent`, `agent.ebpf`), typed by the part: the
 * collectors' keys are in the document (load.ts checked it against ./document.ts) but not in the core's `Config`.
 */
export function keysIn<C extends TProperties>(_part: ConfigPart<C>, section: object): Static<TObject<C>> {
  return section as Static<TObject<C>>;
}
