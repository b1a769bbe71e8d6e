/**
 * Loading the configuration: defaults -> YAML with ${VAR} expansion -> environment overrides (SVC_*, then the
 * OpenTelemetry OTEL_* variables) -> check.
 * Every problem is collected with its key path and reported at once in a ConfigError.
 */
import { existsSync, readFileSync } from "node:fs";
import { Value, ValueErrorType, type ValueError } from "@sinclair/typebox/value";
import { LineCounter, parseDocument } from "yaml";
import { ConfigSchema, validateDocument, type ConfigDocument } from "./document";
import { applyEnvOverrides, applyOtelEnvironment, substituteEnv, type Env } from "./env";
import { applyEndpointDefaults } from "../export/config";
import { locateProblems } from "./locate";
import { ConfigError, type ConfigProblem } from "./problems";
import { mayHoldSecret, rawSecretTexts, scrubText, unsendableTokenProblems } from "./secrets";
import { typeUnits, UNIT_HINT } from "./units";
import defaultConfigPath from "./default.yaml" with { type: "file" };

/** Where the agent looks when neither --config nor SVC_CONFIG names a file. */
export const SYSTEM_CONFIG_PATH = "/etc/svc-agent/config.yaml";
/** The section name of the original agent, accepted as an alias of `svc`. */
const LEGACY_LOG_SECTION = "telegen";

export interface LoadedConfig {
  /** The validated configuration, defaults filled in. */
  config: ConfigDocument;
  /** Where it came from: a file path, or "embedded defaults". */
  source: string;
  /** The file path to re-read on reload; undefined for the embedded defaults. */
  path: string | undefined;
}

/** The embedded default configuration's text (shipped inside the binary). */
export function embeddedDefaultText(): string {
  return readFileSync(defaultConfigPath, "utf8");
}

/** Decides which file to load: --config, then SVC_CONFIG, then /etc/svc-agent/config.yaml, else the embedded defaults. */
export function resolveConfigPath(cliPath: string | undefined, env: Env, systemPath = SYSTEM_CONFIG_PATH): string | undefined {
  if (cliPath) return cliPath;
  if (env.SVC_CONFIG) return env.SVC_CONFIG;
  if (existsSync(systemPath)) return systemPath;
  return undefined;
}

/** Reads and validates a configuration file (or the embedded defaults when `path` is undefined). Throws ConfigError. */
export function loadConfig(path: string | undefined, env: Env = process.env): LoadedConfig {
  if (path === undefined) {
    return { config: parseConfig(embeddedDefaultText(), env, "embedded defaults"), source: "embedded defaults", path: undefined };
  }
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? "error";
    throw new ConfigError([{ path: "", message: `cannot read ${path}: ${code === "ENOENT" ? "no such file" : code}` }], path);
  }
  return { config: parseConfig(text, env, path), source: path, path };
}

/**
 * Validates configuration text; throws ConfigError listing every problem with its key path and, where the file
 * has the key, its line and column. No message shows a value written under a secret key, whatever its type.
 */
export function parseConfig(text: string, env: Env = process.env, source = "configuration"): ConfigDocument {
  const problems: ConfigProblem[] = [];
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { prettyErrors: false, uniqueKeys: true, lineCounter });
  if (doc.errors.length > 0) {
    const secrets = rawSecretTexts(bestEffortTree(doc));
    throw new ConfigError(
      doc.errors.map((e) => {
        const { line, col } = lineCounter.linePos(e.pos[0]);
        return { path: "", message: scrubText(`YAML: ${e.message.split("\n")[0]}`, secrets), line, column: col };
      }),
      source,
    );
  }
  let tree: unknown = doc.toJS() ?? {};
  if (typeof tree !== "object" || tree === null || Array.isArray(tree)) {
    const { line, col } = lineCounter.linePos(doc.contents?.range?.[0] ?? 0);
    throw new ConfigError([{ path: "", message: "the document must be a mapping of keys", line, column: col }], source);
  }

  tree = mergeLegacySection(tree as Record<string, unknown>, problems);
  const expanded = substituteEnv(tree, env, problems) as Record<string, unknown>;
  const overridden = applyEnvOverrides(expanded, env, problems);
  applyOtelEnvironment(expanded, env, problems, overridden);
  applyEndpointDefaults(expanded);
  const finish = (found: ConfigProblem[]) => {
    const secrets = rawSecretTexts(expanded);
    const safe = found.map((p) => ({ ...p, message: scrubText(p.message, secrets) }));
    return new ConfigError(locateProblems(safe, doc, lineCounter, overridden), source);
  };

  const withDefaults = Value.Default(ConfigSchema, Value.Clone(expanded));
  // Value.Check first: a valid document (the usual case) is passed without walking the schema a second time with
  // Errors' generators, several times slower (5.9 against 1.0 ms for the embedded defaults, first call).
  if (!Value.Check(ConfigSchema, withDefaults)) for (const error of Value.Errors(ConfigSchema, withDefaults)) problems.push(describe(error));
  if (problems.length > 0) throw finish(dedupe(problems));

  const config = withDefaults as ConfigDocument;
  typeUnits(ConfigSchema, config);
  const crossField = [...validateDocument(config), ...unsendableTokenProblems(config.self_telemetry.auth)];
  if (crossField.length > 0) throw finish(crossField);
  return config;
}

/** The document as far as it parsed (for scrubbing messages about a document with syntax errors). */
function bestEffortTree(doc: ReturnType<typeof parseDocument>): unknown {
  try {
    return doc.toJS();
  } catch {
    return undefined;
  }
}

function mergeLegacySection(tree: Record<string, unknown>, problems: ConfigProblem[]): Record<string, unknown> {
  if (!(LEGACY_LOG_SECTION in tree)) return tree;
  const { [LEGACY_LOG_SECTION]: legacy, ...rest } = tree;
  if (rest.svc !== undefined) {
    problems.push({ path: LEGACY_LOG_SECTION, message: "give the logging keys under svc or under telegen, not both" });
    return rest;
  }
  return { ...rest, svc: legacy };
}

/** Turns a JSON pointer (`/a/b/0`) into the dotted key path operators write (`a.b[0]`). */
export function keyPath(pointer: string): string {
  let out = "";
  for (const raw of pointer.split("/").slice(1)) {
    const part = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    out += /^\d+$/.test(part) ? `[${part}]` : out ? `.${part}` : part;
  }
  return out;
}

/** What the value was, for messages: its JSON text, or only its kind under a key that may hold a secret. */
function shown(path: string, value: unknown): string {
  if (value === undefined) return "nothing";
  if (!mayHoldSecret(path)) return JSON.stringify(value);
  const kind = value === null ? "null" : Array.isArray(value) ? "an array" : typeof value === "object" ? "a mapping" : `a ${typeof value}`;
  return `${kind} (value not shown: secret key)`;
}

function describe(e: ValueError): ConfigProblem {
  const path = keyPath(e.path);
  const got = shown(path, e.value);
  const unit = (e.schema as Record<string, unknown>)[UNIT_HINT];
  if (unit === "duration") return { path, message: `expected a duration like 500ms, 1s or 2m, got ${got}` };
  if (unit === "size") return { path, message: `expected a size like 64MiB or a byte count like 16777216, got ${got}` };
  switch (e.type) {
    case ValueErrorType.ObjectAdditionalProperties:
      return { path, message: "unknown key" };
    case ValueErrorType.Union: {
      const options = unionLiterals(e.schema);
      return { path, message: options ? `expected one of ${options}, got ${got}` : `${e.message}, got ${got}` };
    }
    case ValueErrorType.Literal:
      return { path, message: `expected ${JSON.stringify((e.schema as unknown as { const: unknown }).const)}, got ${got}` };
    default:
      return { path, message: `${lowerFirst(e.message)}, got ${got}` };
  }
}

function unionLiterals(schema: unknown): string | undefined {
  const anyOf = (schema as { anyOf?: Array<{ const?: unknown }> }).anyOf;
  if (!anyOf || !anyOf.every((s) => s.const !== undefined)) return undefined;
  return anyOf.map((s) => JSON.stringify(s.const)).join(", ");
}

function lowerFirst(s: string): string {
  return s.charAt(0).toLowerCase() + s.slice(1);
}

/** Keeps the first problem per key path: a union mismatch otherwise reports once per branch. */
function dedupe(problems: ConfigProblem[]): ConfigProblem[] {
  const seen = new Set<string>();
  return problems.filter((p) => {
    const key = `${p.path}\u0000${p.path === "" ? p.message : ""}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}
