/**
 * The configuration reference, generated from the schemas (every key, type, default, meaning), so the README
 * and `svc-agent help config` cannot drift from what the loader accepts.
 */
import { ConfigSchema } from "./document";
import { UNIT_HINT } from "./units";

interface Row {
  key: string;
  type: string;
  default: string;
  meaning: string;
}

type Schema = Record<string, unknown> & {
  type?: string;
  properties?: Record<string, Schema>;
  anyOf?: Schema[];
  items?: Schema;
  const?: unknown;
  default?: unknown;
  description?: string;
  patternProperties?: Record<string, Schema>;
};

function typeOf(s: Schema): string {
  const unit = s[UNIT_HINT];
  if (unit === "duration") return "duration";
  if (unit === "size") return "size";
  if (s.const !== undefined) return JSON.stringify(s.const);
  if (s.anyOf) {
    if (s.anyOf.every((a) => a.const !== undefined)) return s.anyOf.map((a) => JSON.stringify(a.const)).join(" \\| ");
    return s.anyOf.map(typeOf).join(" \\| ");
  }
  if (s.type === "array") return `array of ${typeOf(s.items ?? {})}`;
  if (s.type === "object" && s.patternProperties) return "map of string";
  return s.type ?? "any";
}

function walk(s: Schema, prefix: string, rows: Row[]): void {
  for (const [k, child] of Object.entries(s.properties ?? {})) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (child.type === "object" && child.properties) {
      walk(child, key, rows);
      continue;
    }
    rows.push({
      key,
      type: typeOf(child),
      default: child.default === undefined ? "" : JSON.stringify(child.default),
      meaning: (child.description ?? "").replace(/\|/g, "\\|"),
    });
    // A list of objects: one row per key of its items, as `list[].key`.
    if (child.type === "array" && child.items?.type === "object" && child.items.properties) walk(child.items, `${key}[]`, rows);
  }
}

export function configRows(): Row[] {
  const rows: Row[] = [];
  walk(ConfigSchema as unknown as Schema, "", rows);
  return rows;
}

/** The reference as a Markdown table. */
export function configReferenceMarkdown(): string {
  const lines = ["| Key | Type | Default | Meaning |", "|---|---|---|---|"];
  for (const r of configRows()) lines.push(`| \`${r.key}\` | ${r.type} | ${r.default ? `\`${r.default}\`` : ""} | ${r.meaning} |`);
  return lines.join("\n") + "\n";
}

const README_START = "<!-- config-reference:start -->";
const README_END = "<!-- config-reference:end -->";
const ENV_START = "<!-- otel-env:start -->";
const ENV_END = "<!-- otel-env:end -->";

/** `text` with the part between `startMark` and `endMark` replaced by `body`. */
function replaceSection(text: string, startMark: string, endMark: string, body: string): string {
  const start = text.indexOf(startMark);
  const end = text.indexOf(endMark);
  if (start === -1 || end < start) throw new Error(`README.md has no ${startMark} ... ${endMark} section`);
  return text.slice(0, start + startMark.length) + "\n" + body + text.slice(end);
}

/** `bun run src/config/reference.ts`: rewrites the reference and OpenTelemetry variable sections of README.md. */
if (import.meta.main) {
  const { readFileSync, writeFileSync } = await import("node:fs");
  const path = new URL("../../README.md", import.meta.url).pathname;
  const { otelVariablesMarkdown } = await import("./env");
  const text = readFileSync(path, "utf8");
  const withReference = replaceSection(text, README_START, README_END, configReferenceMarkdown());
  writeFileSync(path, replaceSection(withReference, ENV_START, ENV_END, otelVariablesMarkdown()));
}
