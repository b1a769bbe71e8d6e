/**
 * Generates deploy/helm/svc-agent/values.schema.json, which Helm checks the values against on install,
 * upgrade and template: `config` is the agent's own configuration schema (src/config/document.ts, unknown
 * keys refused as the agent refuses them), and the other top-level values are the ones values.yaml
 * defines (a misspelled one is refused). Keys may be left out under `config` (the agent fills defaults).
 * Durations and sizes, which the agent checks with its own parsers, become the equivalent regular
 * expressions; any scalar may also be a `${VAR}` reference, substituted by the agent at load time.
 *
 *   bun deploy/helm/values-schema.ts        (writes the file; test/deploy checks it is current)
 * The build (build.ts) runs it too, so a configuration key added anywhere reaches the chart's schema.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parse as parseYaml } from "yaml";
import { ConfigSchema } from "../../src/config/document";
import { DURATION_PATTERN, SIZE_PATTERN } from "../../src/config/units";

const CHART_DIR = resolve(import.meta.dir, "svc-agent");
export const VALUES_SCHEMA_PATH = join(CHART_DIR, "values.schema.json");
/** The logging section's legacy name, accepted by the loader as an alias of `svc`. */
const LEGACY_LOG_SECTION = "telegen";

/** What parseDuration and parseSize accept, as patterns (kept beside the parsers). */
export { DURATION_PATTERN, SIZE_PATTERN };
/** A whole-value `${VAR}` or `${VAR:-default}` reference. */
export const ENV_REFERENCE_PATTERN = "^\\$\\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\\}$";

type Json = Record<string, unknown>;

function convert(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(convert);
  if (node === null || typeof node !== "object") return node;
  const out: Json = {};
  for (const [k, v] of Object.entries(node as Json)) {
    if (k === "required") continue;
    out[k] = convert(v);
  }
  if (out.format === "duration" || out.format === "size") {
    out.pattern = out.format === "duration" ? DURATION_PATTERN : SIZE_PATTERN;
    delete out.format;
  }
  return out;
}

/** Lets every scalar leaf also be a `${VAR}` reference (strings already can be anything their pattern allows). */
function allowEnvReferences(node: Json): Json {
  if (node.type === "object") {
    const props = node.properties as Record<string, Json> | undefined;
    const pattern = node.patternProperties as Record<string, Json> | undefined;
    return {
      ...node,
      ...(props ? { properties: Object.fromEntries(Object.entries(props).map(([k, v]) => [k, allowEnvReferences(v)])) } : {}),
      ...(pattern ? { patternProperties: Object.fromEntries(Object.entries(pattern).map(([k, v]) => [k, allowEnvReferences(v)])) } : {}),
    };
  }
  if (node.type === "array") return { ...node, items: allowEnvReferences(node.items as Json) };
  if (node.type === "string" && node.pattern === undefined) return node;
  const { default: def, description, ...rest } = node;
  return {
    ...(description !== undefined ? { description } : {}),
    ...(def !== undefined ? { default: def } : {}),
    anyOf: [rest, { type: "string", pattern: ENV_REFERENCE_PATTERN }],
  };
}

export function valuesSchema(): Json {
  const config = allowEnvReferences(convert(JSON.parse(JSON.stringify(ConfigSchema))) as Json);
  const props = config.properties as Json;
  config.properties = { ...props, [LEGACY_LOG_SECTION]: props.svc };
  const values = parseYaml(readFileSync(join(CHART_DIR, "values.yaml"), "utf8")) as Json;
  const properties: Json = {};
  for (const key of Object.keys(values)) properties[key] = key === "config" ? config : {};
  return {
    $schema: "http://json-schema.org/draft-07/schema#",
    title: "svc-agent chart values",
    type: "object",
    additionalProperties: false,
    properties,
  };
}

export function valuesSchemaText(): string {
  return `${JSON.stringify(valuesSchema(), null, 2)}\n`;
}

/** Build step (build.ts GENERATORS): rewrites the file when the configuration schema changed, so the chart always matches the binary. */
export async function generate(): Promise<void> {
  const text = valuesSchemaText();
  if (!existsSync(VALUES_SCHEMA_PATH) || readFileSync(VALUES_SCHEMA_PATH, "utf8") !== text) writeFileSync(VALUES_SCHEMA_PATH, text);
}

if (import.meta.main) {
  await generate();
  console.log(`wrote ${VALUES_SCHEMA_PATH}`);
}
