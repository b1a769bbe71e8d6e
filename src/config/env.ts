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

/** The signals of the per-signal OTEL_EXPORTER_OTLP_<SIGNAL>_* variables, with the `otlp.signals` key each sets. */
const OTEL_SIGNALS = [
  ["TRACES", "traces"],
  ["METRICS", "metrics"],
  ["LOGS", "logs"],
  ["PROFILES", "profiles"],
] as const;
const OTEL_PROTOCOLS = new Set(["grpc", "http/protobuf"]);
const OTEL_COMPRESSIONS = new Set(["gzip", "none"]);

/** Every OpenTelemetry variable the agent reads, the key it sets and how its value is read. */
export const OTEL_VARIABLES: ReadonlyArray<{ variable: string; key: string; value: string }> = [
  { variable: "OTEL_SERVICE_NAME", key: "service_name", value: "text" },
  { variable: "OTEL_RESOURCE_ATTRIBUTES", key: "resource_attributes", value: "key=value,... (percent-encoded values); service.name sets service_name unless OTEL_SERVICE_NAME is set" },
  { variable: "OTEL_EXPORTER_OTLP_ENDPOINT", key: "otlp.endpoint", value: "URL (http/protobuf appends /v1/<signal>) or host:port" },
  { variable: "OTEL_EXPORTER_OTLP_PROTOCOL", key: "otlp.protocol", value: "grpc or http/protobuf" },
  { variable: "OTEL_EXPORTER_OTLP_HEADERS", key: "otlp.headers", value: "key=value,... (percent-encoded values), merged over the file's; secret" },
  { variable: "OTEL_EXPORTER_OTLP_COMPRESSION", key: "otlp.compression", value: "gzip or none" },
  { variable: "OTEL_EXPORTER_OTLP_TIMEOUT", key: "otlp.timeout", value: "milliseconds" },
  { variable: "OTEL_EXPORTER_OTLP_INSECURE", key: "otlp.insecure", value: "true or false" },
  { variable: "OTEL_EXPORTER_OTLP_CERTIFICATE", key: "otlp.tls.ca_file", value: "PEM file path" },
  { variable: "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", key: "otlp.tls.cert_file", value: "PEM file path" },
  { variable: "OTEL_EXPORTER_OTLP_CLIENT_KEY", key: "otlp.tls.key_file", value: "PEM file path" },
  ...OTEL_SIGNALS.flatMap(([v, s]) => [
    { variable: `OTEL_EXPORTER_OTLP_${v}_ENDPOINT`, key: `otlp.signals.${s}.endpoint`, value: "URL used as it is (no path appended) or host:port" },
    { variable: `OTEL_EXPORTER_OTLP_${v}_PROTOCOL`, key: `otlp.signals.${s}.protocol`, value: "grpc or http/protobuf" },
    { variable: `OTEL_EXPORTER_OTLP_${v}_HEADERS`, key: `otlp.signals.${s}.headers`, value: "key=value,...; replaces the generic headers for this signal; secret" },
    { variable: `OTEL_EXPORTER_OTLP_${v}_COMPRESSION`, key: `otlp.signals.${s}.compression`, value: "gzip or none" },
    { variable: `OTEL_EXPORTER_OTLP_${v}_TIMEOUT`, key: `otlp.signals.${s}.timeout`, value: "milliseconds" },
  ]),
];

/** The OpenTelemetry variables as a Markdown section (README and `svc-agent help config`). */
export function otelVariablesMarkdown(): string {
  const lines = [
    "OpenTelemetry environment variables override the configuration file: the order is defaults, then the file",
    "(with `${VAR}` expansion), then the `SVC_*` overrides, then these variables, then validation. An empty variable",
    "counts as unset. A malformed value is an error naming the variable (a header's value is never printed). Header",
    "values are secrets wherever they come from: `[REDACTED]` in `/config`, the diagnostics bundle and logs.",
    "",
    "| Variable | Sets | Value |",
    "|---|---|---|",
  ];
  for (const o of OTEL_VARIABLES) lines.push(`| \`${o.variable}\` | \`${o.key}\` | ${o.value} |`);
  return lines.join("\n") + "\n";
}

/** The object at `path` under `doc`, created when absent; undefined when something else is in the way (validation reports it). */
function section(doc: Record<string, unknown>, path: readonly string[]): Record<string, unknown> | undefined {
  let node = doc;
  for (const key of path) {
    const next = node[key];
    if (next === undefined || next === null) node[key] = {};
    else if (typeof next !== "object" || Array.isArray(next)) return undefined;
    node = node[key] as Record<string, unknown>;
  }
  return node;
}

/**
 * `key=value,key2=value2` (the W3C Baggage form of OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES),
 * values percent-decoded. A malformed entry is a problem naming the variable and the entry's position, never
 * its text (header values are secrets).
 */
export function parseKeyValueList(variable: string, raw: string, path: string, problems: ConfigProblem[]): Record<string, string> | undefined {
  const out: Record<string, string> = {};
  let ok = true;
  raw.split(",").forEach((entry, i) => {
    if (entry.trim() === "") return;
    const eq = entry.indexOf("=");
    const key = eq > 0 ? entry.slice(0, eq).trim() : "";
    if (!key) {
      problems.push({ path, message: `${variable}: entry ${i + 1} is not key=value` });
      ok = false;
      return;
    }
    try {
      out[key] = decodeURIComponent(entry.slice(eq + 1).trim());
    } catch {
      problems.push({ path, message: `${variable}: the value of entry ${i + 1} (${key}) is not valid percent-encoding` });
      ok = false;
    }
  });
  return ok ? out : undefined;
}

/**
 * Applies the OpenTelemetry environment variables onto `doc` (mutating it), after the file and before
 * validation, so they override the file's keys (the SVC_* overrides work the same way). Per-signal variables
 * go to `otlp.signals.<signal>`; OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES are merged over the
 * file's maps (the variable wins for a key in both); `service.name` in OTEL_RESOURCE_ATTRIBUTES sets
 * `service_name` unless OTEL_SERVICE_NAME is set. An empty variable counts as unset. Problems name the variable.
 * Records in `applied` the key path each given variable sets (a problem there comes from the environment).
 */
export function applyOtelEnvironment(doc: Record<string, unknown>, env: Env, problems: ConfigProblem[], applied: Map<string, string> = new Map()): void {
  const get = (name: string, path?: string): string | undefined => {
    const v = env[name];
    if (v === undefined || v.trim() === "") return undefined;
    if (path) applied.set(path, name);
    return v.trim();
  };
  const attributes = get("OTEL_RESOURCE_ATTRIBUTES", "resource_attributes");
  if (attributes !== undefined) {
    const parsed = parseKeyValueList("OTEL_RESOURCE_ATTRIBUTES", attributes, "resource_attributes", problems);
    if (parsed) {
      const serviceName = parsed["service.name"];
      delete parsed["service.name"];
      if (serviceName) doc.service_name = serviceName;
      const existing = doc.resource_attributes;
      const base = existing && typeof existing === "object" && !Array.isArray(existing) ? existing : {};
      doc.resource_attributes = { ...base, ...parsed };
    }
  }
  const serviceName = get("OTEL_SERVICE_NAME", "service_name");
  if (serviceName !== undefined) doc.service_name = serviceName;

  const applyExporter = (prefix: string, path: readonly string[], generic: boolean): void => {
    const keyPath = path.join(".");
    const endpoint = get(`${prefix}_ENDPOINT`, `${keyPath}.endpoint`);
    const protocol = get(`${prefix}_PROTOCOL`, `${keyPath}.protocol`);
    const headers = get(`${prefix}_HEADERS`, `${keyPath}.headers`);
    const compression = get(`${prefix}_COMPRESSION`, `${keyPath}.compression`);
    const timeout = get(`${prefix}_TIMEOUT`, `${keyPath}.timeout`);
    if ([endpoint, protocol, headers, compression, timeout].every((v) => v === undefined)) return;
    const target = section(doc, path);
    if (!target) return;
    if (endpoint !== undefined) target.endpoint = endpoint;
    if (protocol !== undefined) {
      if (OTEL_PROTOCOLS.has(protocol)) target.protocol = protocol;
      else problems.push({ path: `${keyPath}.protocol`, message: `${prefix}_PROTOCOL=${JSON.stringify(protocol)}: expected grpc or http/protobuf (http/json is not supported)` });
    }
    if (compression !== undefined) {
      if (OTEL_COMPRESSIONS.has(compression)) target.compression = compression;
      else problems.push({ path: `${keyPath}.compression`, message: `${prefix}_COMPRESSION=${JSON.stringify(compression)}: expected gzip or none` });
    }
    if (timeout !== undefined) {
      if (/^\d+$/.test(timeout) && Number(timeout) > 0) target.timeout = `${Number(timeout)}ms`;
      else problems.push({ path: `${keyPath}.timeout`, message: `${prefix}_TIMEOUT=${JSON.stringify(timeout)}: expected a positive whole number of milliseconds` });
    }
    if (headers !== undefined) {
      const parsed = parseKeyValueList(`${prefix}_HEADERS`, headers, `${keyPath}.headers`, problems);
      if (parsed) {
        const existing = generic ? target.headers : undefined;
        const base = existing && typeof existing === "object" && !Array.isArray(existing) ? existing : {};
        target.headers = { ...base, ...parsed };
        for (const name of Object.keys(parsed)) applied.set(`${keyPath}.headers.${name}`, `${prefix}_HEADERS`);
      }
    }
  };
  applyExporter("OTEL_EXPORTER_OTLP", ["otlp"], true);
  for (const [variable, signal] of OTEL_SIGNALS) applyExporter(`OTEL_EXPORTER_OTLP_${variable}`, ["otlp", "signals", signal], false);

  const insecure = get("OTEL_EXPORTER_OTLP_INSECURE", "otlp.insecure");
  if (insecure !== undefined) {
    const w = insecure.toLowerCase();
    if (w === "true" || w === "false") {
      const otlp = section(doc, ["otlp"]);
      if (otlp) otlp.insecure = w === "true";
    } else problems.push({ path: "otlp.insecure", message: `OTEL_EXPORTER_OTLP_INSECURE=${JSON.stringify(insecure)}: expected true or false` });
  }
  const files = [
    ["OTEL_EXPORTER_OTLP_CERTIFICATE", "ca_file"],
    ["OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "cert_file"],
    ["OTEL_EXPORTER_OTLP_CLIENT_KEY", "key_file"],
  ] as const;
  for (const [variable, key] of files) {
    const v = get(variable, `otlp.tls.${key}`);
    if (v === undefined) continue;
    const tls = section(doc, ["otlp", "tls"]);
    if (tls) tls[key] = v;
  }
}
