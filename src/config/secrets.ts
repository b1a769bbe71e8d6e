/**
 * Which configuration keys hold secrets, in one place: their values are never logged, never shown, redacted in
 * /config and diagnostics bundles, and never echoed by a validation message, whatever their type.
 * Code that reads secrets from elsewhere (environment variables mapped onto these keys) asks `isSecretPath`.
 */
import { REDACTED } from "../log/scrub";
import { ConfigSchema } from "./document";

export { REDACTED, scrubText } from "../log/scrub";

/** A key whose value is secret wherever it appears. */
const SECRET_KEY_RE = /(token|secret|password|passwd|key|credential|authorization)/i;
/** Maps whose every value is secret (exporter headers often carry API keys). */
const SECRET_MAPS: ReadonlySet<string> = new Set([
  "otlp.headers",
  "otlp.signals.traces.headers",
  "otlp.signals.metrics.headers",
  "otlp.signals.logs.headers",
  "otlp.signals.profiles.headers",
]);
/** Secrets no one writes shorter; shorter strings are not scrubbed from free text (they would mangle it). */
export const SCRUB_MIN_LENGTH = 4;
/** Characters a client can send in `Authorization: Bearer <token>`: visible ASCII, no space. */
const SENDABLE_TOKEN_RE = /^[\x21-\x7e]*$/;

/** The segments of a dotted key path (`a.b[0].c` -> a, b, c); array indexes are not keys. */
function segments(path: string): string[] {
  return path.split(".").map((s) => s.replace(/\[\d+\]/g, "")).filter((s) => s.length > 0);
}

/**
 * True when the value at `path` (a dotted key path such as `self_telemetry.auth.bearer_token`,
 * `self_telemetry.auth.read_only_tokens[0]` or `otlp.headers.x-api-key`) is, or lies inside, a secret.
 */
export function isSecretPath(path: string): boolean {
  const parts = segments(path);
  for (let i = 0; i < parts.length; i++) {
    if (SECRET_KEY_RE.test(parts[i]!)) return true;
    if (i > 0 && SECRET_MAPS.has(parts.slice(0, i).join("."))) return true;
  }
  return false;
}

let secretSchemaPaths: string[] | undefined;
/** The secret keys the schema declares, as dotted paths (computed once). */
function schemaSecretPaths(): string[] {
  if (secretSchemaPaths) return secretSchemaPaths;
  const out: string[] = [...SECRET_MAPS];
  const walk = (schema: { properties?: Record<string, unknown> }, prefix: string) => {
    for (const [k, child] of Object.entries(schema.properties ?? {})) {
      const path = prefix ? `${prefix}.${k}` : k;
      if (SECRET_KEY_RE.test(k)) out.push(path);
      else walk(child as { properties?: Record<string, unknown> }, path);
    }
  };
  walk(ConfigSchema, "");
  return (secretSchemaPaths = out);
}

/**
 * True when the value written at `path` may contain a secret: the path is secret, or it is a section that holds
 * one (`self_telemetry.auth` written as a string may be the token put one level too high). A validation message
 * about such a path never shows the value.
 */
export function mayHoldSecret(path: string): boolean {
  if (isSecretPath(path)) return true;
  const normalized = segments(path).join(".");
  if (normalized === "") return true;
  return schemaSecretPaths().some((p) => p === normalized || p.startsWith(`${normalized}.`));
}

/** Every secret string in the configuration (for scrubbing logs). */
export function secretsOf(config: unknown): string[] {
  const out: string[] = [];
  collect(config, "", (path, value) => {
    if (typeof value === "string" && value && isSecretPath(path)) out.push(value);
  });
  return out;
}

/**
 * The text of every scalar written under a secret key in a raw (not yet validated) document, whatever its type:
 * `bearer_token: [X]` gives "X". Validation messages are scrubbed of these before anyone sees them.
 */
export function rawSecretTexts(tree: unknown): string[] {
  const out = new Set<string>();
  collect(tree, "", (path, value) => {
    if (value === null || typeof value === "object" || !isSecretPath(path)) return;
    const text = String(value);
    if (text.length >= SCRUB_MIN_LENGTH) out.add(text);
  });
  return [...out].sort((a, b) => b.length - a.length);
}

/** A deep copy of the configuration with every secret replaced by REDACTED (empty values stay empty). */
export function redactConfig<T>(config: T): T {
  const copy = (node: unknown, path: string): unknown => {
    if (isSecretPath(path)) {
      if (typeof node === "string") return node === "" ? "" : REDACTED;
      if (Array.isArray(node)) return node.map((v) => (v === "" ? "" : REDACTED));
    }
    if (Array.isArray(node)) return node.map((v, i) => copy(v, `${path}[${i}]`));
    if (node !== null && typeof node === "object") {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(node)) out[k] = copy(v, path ? `${path}.${k}` : k);
      return out;
    }
    return node;
  };
  return copy(config, "") as T;
}

/**
 * Bearer tokens no client can send (whitespace, control or non-ASCII characters): `Authorization: Bearer <token>`
 * carries visible ASCII only, so such a token would lock every client out. The values are not shown.
 */
export function unsendableTokenProblems(auth: { bearer_token: string; read_only_tokens: string[] }, prefix = "self_telemetry.auth"): Array<{ path: string; message: string }> {
  const message = "must be visible ASCII without spaces or control characters: no client can send it in an Authorization header (the value is not shown)";
  const problems: Array<{ path: string; message: string }> = [];
  if (!SENDABLE_TOKEN_RE.test(auth.bearer_token)) problems.push({ path: `${prefix}.bearer_token`, message });
  auth.read_only_tokens.forEach((t, i) => {
    if (!SENDABLE_TOKEN_RE.test(t)) problems.push({ path: `${prefix}.read_only_tokens[${i}]`, message });
  });
  return problems;
}

/** Calls `fn` for every node of a tree with its dotted key path (array items as `path[i]`). */
function collect(node: unknown, path: string, fn: (path: string, value: unknown) => void): void {
  fn(path, node);
  if (Array.isArray(node)) node.forEach((v, i) => collect(v, `${path}[${i}]`, fn));
  else if (node !== null && typeof node === "object")
    for (const [k, v] of Object.entries(node)) collect(v, path ? `${path}.${k}` : k, fn);
}
