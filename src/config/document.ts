/**
 * The whole configuration document: the sections of ./schema.ts and every registered collector's keys
 * (src/collectors/registry.ts). What load.ts checks a file against, the configuration reference documents and
 * GET /config answers with.
 */
import type { Static } from "@sinclair/typebox";
import { CollectorKeys, EbpfSetKeys, validateCollectors } from "../collectors/registry";
import { configSchema, validateConfig } from "./schema";
import type { ConfigProblem } from "./problems";

export const ConfigSchema = configSchema(CollectorKeys, EbpfSetKeys);

/** The running configuration: every key present, defaults filled in, the collectors' keys included. */
export type ConfigDocument = Static<typeof ConfigSchema>;

/** Cross-field rules of the whole document, the collectors' in the place of their keys. */
export function validateDocument(c: ConfigDocument): ConfigProblem[] {
  return validateConfig(c, validateCollectors);
}
