/**
 * Durations and sizes as operators write them in YAML, parsed strictly.
 * A value that does not parse is an error naming what was expected; nothing is guessed or clamped.
 */
import { FormatRegistry, Type, type TInteger, type TSchema, type TString, type TUnion } from "@sinclair/typebox";

const DURATION_UNITS_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

const SIZE_UNITS_BYTES: Record<string, number> = {
  "": 1,
  b: 1,
  k: 1000,
  kb: 1000,
  m: 1000 ** 2,
  mb: 1000 ** 2,
  g: 1000 ** 3,
  gb: 1000 ** 3,
  ki: 1024,
  kib: 1024,
  mi: 1024 ** 2,
  mib: 1024 ** 2,
  gi: 1024 ** 3,
  gib: 1024 ** 3,
};

const DURATION_PART = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/y;
const SIZE_RE = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/;

/** Parses "500ms", "1s", "2m", "1h30m" into milliseconds; returns undefined when the text is not a duration. */
export function parseDuration(text: string): number | undefined {
  const s = text.trim();
  if (s === "0") return 0;
  if (s.length === 0) return undefined;
  let total = 0;
  DURATION_PART.lastIndex = 0;
  while (DURATION_PART.lastIndex < s.length) {
    const at = DURATION_PART.lastIndex;
    const m = DURATION_PART.exec(s);
    if (!m || m.index !== at) return undefined;
    total += Number(m[1]) * DURATION_UNITS_MS[m[2]!]!;
  }
  return total;
}

/** Parses "64MiB", "16777216", "1.5GB" (or a plain integer) into bytes; undefined when it is not a size. */
export function parseSize(value: string | number): number | undefined {
  if (typeof value === "number") return Number.isSafeInteger(value) && value >= 0 ? value : undefined;
  const m = SIZE_RE.exec(value);
  if (!m) return undefined;
  const unit = SIZE_UNITS_BYTES[m[2]!.toLowerCase()];
  if (unit === undefined) return undefined;
  const bytes = Number(m[1]) * unit;
  return Number.isSafeInteger(bytes) ? bytes : Math.round(bytes);
}

/** Formats milliseconds the way durations are written in configuration ("1.5s", "250ms", "2m"). */
export function formatDuration(ms: number): string {
  if (ms % 3_600_000 === 0 && ms > 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0 && ms > 0) return `${ms / 60_000}m`;
  if (ms % 1000 === 0 && ms > 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}

/**
 * The same grammars as JSON Schema patterns, for documents read by other validators (the Helm values schema, the
 * OpenAPI document), where `format: duration` would mean ISO 8601. test/deploy holds them to the parsers.
 */
/** What parseDuration accepts: "0", or number+unit parts ("1h30m", "250ms"), surrounding blanks allowed. */
export const DURATION_PATTERN = "^\\s*(0|([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)\\s*$";
/** What parseSize accepts as text: a number and an optional unit (b, k, kb, ki, kib, m..., g...; any case). */
export const SIZE_PATTERN = "^\\s*[0-9]+(\\.[0-9]+)?\\s*([bB]|[kKmMgG]([bB]|[iI][bB]?)?)?\\s*$";

FormatRegistry.Set("duration", (v) => parseDuration(v) !== undefined);
FormatRegistry.Set("size", (v) => parseSize(v) !== undefined);

/** Marker read by the error formatter to explain what a duration or size looks like. */
export const UNIT_HINT = "x-svc-unit";

/** A duration written as text ("500ms", "1s", "2m"). Read it with `msOf`. */
export function Duration(defaultValue: string, description: string): TString {
  return Type.String({ format: "duration", default: defaultValue, description, [UNIT_HINT]: "duration" });
}

/** A size in bytes, as an integer or text with a unit ("64MiB", "16777216"). Read it with `bytesOf`. */
export function Size(defaultValue: string | number, description: string): TUnion<[TInteger, TString]> {
  return Type.Union([Type.Integer({ minimum: 0 }), Type.String({ format: "size" })], {
    default: defaultValue,
    description,
    [UNIT_HINT]: "size",
  });
}

/** Milliseconds of a duration that validation already accepted. */
export function durationMs(text: string): number {
  const ms = parseDuration(text);
  if (ms === undefined) throw new Error(`not a duration: ${JSON.stringify(text)}`);
  return ms;
}

/** Bytes of a size that validation already accepted. */
export function sizeBytes(value: string | number): number {
  const b = parseSize(value);
  if (b === undefined) throw new Error(`not a size: ${JSON.stringify(value)}`);
  return b;
}

/**
 * The typed view of a loaded configuration: every duration and size read into a number once, at load, and kept
 * beside the text the operator wrote. The configuration itself keeps that text (it is what /config,
 * --validate-config, the diagnostics bundle and reload comparisons see); `msOf` and `bytesOf` read the numbers.
 */
interface TypedValue {
  text: string | number;
  value: number;
}
const TYPED = new WeakMap<object, Record<string, TypedValue>>();

/** The unit of a schema node: its own hint, or that of a union member ("auto" | size). */
function unitOf(schema: TSchema): "duration" | "size" | undefined {
  const own = (schema as Record<string, unknown>)[UNIT_HINT];
  if (own === "duration" || own === "size") return own;
  for (const member of (schema.anyOf as TSchema[] | undefined) ?? []) {
    const unit = unitOf(member);
    if (unit) return unit;
  }
  return undefined;
}

/** Reads every duration and size of `value`, already checked against `schema`, into numbers (see TYPED). */
export function typeUnits(schema: TSchema, value: unknown): void {
  if (value === null || typeof value !== "object") return;
  if (Array.isArray(value)) {
    const items = schema.items as TSchema | undefined;
    if (items) for (const v of value) typeUnits(items, v);
    return;
  }
  const node = value as Record<string, unknown>;
  const props = (schema.properties ?? {}) as Record<string, TSchema>;
  const patterns = Object.values((schema.patternProperties ?? {}) as Record<string, TSchema>);
  for (const key of Object.keys(node)) {
    const sub = props[key] ?? patterns[0];
    if (sub === undefined) continue;
    const v = node[key];
    const unit = unitOf(sub);
    if (unit !== undefined && (typeof v === "string" || typeof v === "number")) {
      const n = unit === "duration" ? (typeof v === "string" ? parseDuration(v) : undefined) : parseSize(v);
      if (n === undefined) continue;
      let typed = TYPED.get(node);
      if (!typed) TYPED.set(node, (typed = {}));
      typed[key] = { text: v, value: n };
    } else typeUnits(sub, v);
  }
  for (const member of (schema.anyOf as TSchema[] | undefined) ?? []) typeUnits(member, value);
}

/** The number read at load for `node[key]`, while the node still holds the text it was read from. */
function typedValue(node: object, key: string): number | undefined {
  const t = TYPED.get(node)?.[key];
  return t !== undefined && t.text === (node as Record<string, unknown>)[key] ? t.value : undefined;
}

/** Milliseconds of the duration `node[key]` (read at load; a node built elsewhere, e.g. in a test, is parsed here). */
export function msOf<T extends object, K extends keyof T & string>(node: T, key: K): number {
  return typedValue(node, key) ?? durationMs(node[key] as string);
}

/** Bytes of the size `node[key]` (read at load; a node built elsewhere is parsed here). Check for "auto" first. */
export function bytesOf<T extends object, K extends keyof T & string>(node: T, key: K): number {
  return typedValue(node, key) ?? sizeBytes(node[key] as string | number);
}
