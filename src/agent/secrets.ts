/** Which configuration values are secrets: never logged, never shown, redacted in /config and bundles. */
import type { Config } from "../config/schema";

/** Replaces a secret in every view of the configuration. */
export const REDACTED = "[REDACTED]";

/** A key whose value is secret wherever it appears. */
const SECRET_KEY_RE = /(token|secret|password|passwd|key|credential|authorization)/i;
/** Maps whose every value is secret (exporter headers often carry API keys). */
const SECRET_MAPS = new Set(["otlp.headers", "otlp.signals.traces.headers", "otlp.signals.metrics.headers", "otlp.signals.logs.headers", "otlp.signals.profiles.headers"]);

/** Every secret string in the configuration (for scrubbing logs). */
export function secretsOf(config: Config): string[] {
  const out: string[] = [];
  walk(config, "", (path, key, value) => {
    if (typeof value === "string" && value && isSecret(path, key)) out.push(value);
    if (Array.isArray(value) && isSecret(path, key)) for (const v of value) if (typeof v === "string" && v) out.push(v);
  });
  return out;
}

/** A deep copy of the configuration with every secret replaced by REDACTED (empty values stay empty). */
export function redactConfig<T>(config: T): T {
  const copy = (node: unknown, path: string, key: string): unknown => {
    if (isSecret(path, key)) {
      if (typeof node === "string") return node === "" ? "" : REDACTED;
      if (Array.isArray(node)) return node.map((v) => (v === "" ? "" : REDACTED));
    }
    if (Array.isArray(node)) return node.map((v, i) => copy(v, `${path}[${i}]`, key));
    if (node !== null && typeof node === "object") {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(node)) out[k] = copy(v, path ? `${path}.${k}` : k, k);
      return out;
    }
    return node;
  };
  return copy(config, "", "") as T;
}

function isSecret(path: string, key: string): boolean {
  if (SECRET_KEY_RE.test(key)) return true;
  const parent = path.slice(0, path.lastIndexOf("."));
  return SECRET_MAPS.has(parent);
}

function walk(node: unknown, path: string, fn: (path: string, key: string, value: unknown) => void, key = ""): void {
  fn(path, key, node);
  if (node !== null && typeof node === "object" && !Array.isArray(node))
    for (const [k, v] of Object.entries(node)) walk(v, path ? `${path}.${k}` : k, fn, k);
}
