/**
 * `${VAR}` and `${VAR:-default}` substitution over a parsed YAML tree, and the SVC_* environment overrides.
 * Substitution works on values, never on YAML text, so a variable cannot inject structure.
 * A value that is exactly one `${VAR}` takes the YAML type of the variable's text (so `port: ${PORT}` is an integer).
 */
import { parse as parseYamlScalar } from "yaml";
import type { ConfigProblem } from "./problems";
import { isSecretPath } from "./secrets";

const VAR_RE = /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{([^}]*)\}?/g;
const WHOLE_VAR_RE = /^\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}$/;

export type Env = Record<string, string | undefined>;

function substituteString(value: string, path: string, env: Env, problems: ConfigProblem[]): unknown {
  const whole = WHOLE_VAR_RE.exec(value);
  if (whole) {
    const v = env[whole[1]!] ?? whole[2];
    if (v === undefined) {
      problems.push({ path, message: `environment variable ${whole[1]} is not set (write \${${whole[1]}:-default} to give a default)` });
      return value;
    }
    return scalarOf(v);
  }
  return value.replace(VAR_RE, (m, name?: string, def?: string, bad?: string) => {
    if (m === "$$") return "$";
    if (bad !== undefined) {
      const what = isSecretPath(path) ? "a malformed variable reference (value not shown: secret key)" : `malformed variable reference ${JSON.stringify(m)}`;
      problems.push({ path, message: `${what}; write \${NAME} or \${NAME:-default}` });
      return m;
    }
    const v = env[name!] ?? def;
    if (v === undefined) {
      problems.push({ path, message: `environment variable ${name} is not set (write \${${name}:-default} to give a default)` });
      return m;
    }
    return v;
  });
}

/** A variable's text read as a YAML scalar: "true" is a boolean, "8080" a number, anything else the text. */
function scalarOf(text: string): unknown {
  try {
    const v = parseYamlScalar(text);
    if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") return v;
  } catch {
    /* not a scalar: keep the text */
  }
  return text;
}

/** Replaces every `${VAR}` in the string values of `tree` (and in `$$` escapes), recording unset variables as problems. */
export function substituteEnv(tree: unknown, env: Env, problems: ConfigProblem[], path = ""): unknown {
  if (typeof tree === "string") return substituteString(tree, path, env, problems);
  if (Array.isArray(tree)) return tree.map((v, i) => substituteEnv(v, env, problems, `${path}[${i}]`));
  if (tree !== null && typeof tree === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(tree)) out[k] = substituteEnv(v, env, problems, path ? `${path}.${k}` : k);
    return out;
  }
  return tree;
}

/** Environment variables that override configuration keys, with the key path each sets. */
export const ENV_OVERRIDES: ReadonlyArray<{ variable: string; path: string[]; kind: "string" | "boolean" }> = [
  { variable: "SVC_LOG_LEVEL", path: ["svc", "log_level"], kind: "string" },
  { variable: "SVC_LOG_FORMAT", path: ["svc", "log_format"], kind: "string" },
  { variable: "SVC_AGENT_EBPF_DEBUG", path: ["agent", "ebpf", "debug"], kind: "boolean" },
  { variable: "SVC_DEBUG", path: ["self_telemetry", "debug", "enabled"], kind: "boolean" },
];

const TRUE_WORDS = new Set(["1", "true", "yes", "on"]);
const FALSE_WORDS = new Set(["0", "false", "no", "off"]);

/**
 * Applies the SVC_* overrides onto `doc` (mutating it); a malformed value is a problem naming the variable.
 * Returns the dotted key path set by each variable that was given (a problem there comes from the environment).
 */
export function applyEnvOverrides(doc: Record<string, unknown>, env: Env, problems: ConfigProblem[]): Map<string, string> {
  const applied = new Map<string, string>();
  for (const o of ENV_OVERRIDES) {
    const raw = env[o.variable];
    if (raw === undefined || raw === "") continue;
    applied.set(o.path.join("."), o.variable);
    let value: unknown = raw;
    if (o.kind === "boolean") {
      const w = raw.trim().toLowerCase();
      if (TRUE_WORDS.has(w)) value = true;
      else if (FALSE_WORDS.has(w)) value = false;
      else {
        problems.push({ path: o.path.join("."), message: `${o.variable}=${JSON.stringify(raw)} is not a boolean (true/false)` });
        continue;
      }
    }
    let node = doc;
    for (const key of o.path.slice(0, -1)) {
      const next = node[key];
      if (next === undefined || next === null) node[key] = {};
      else if (typeof next !== "object" || Array.isArray(next)) break;
      node = node[key] as Record<string, unknown>;
    }
    node[o.path[o.path.length - 1]!] = value;
  }
  return applied;
}
