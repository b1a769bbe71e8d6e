/**
 * A renderer for the svc-agent Helm chart, for machines without `helm` (this project's build and CI
 * machines have none: no registry that ships it is reachable). It implements the subset of Go
 * text/template and of Helm's functions that deploy/helm/svc-agent uses, and nothing more:
 *
 *   actions     {{ pipeline }}  {{- trim -}}  {{/* comment *\/}}  {{ $v := pipeline }}
 *   control     if / else if / else / end, with / else / end, range [$k, $v :=] / else / end,
 *               define / end, include
 *   operands    .Field.chains  $  $var.field  "strings"  `raw`  numbers  true false nil  ( pipeline )
 *   functions   default quote squote toYaml nindent indent printf trunc trimSuffix replace lower
 *               sha256sum b64enc splitList last int toString eq ne not and or empty required hasKey
 *               list dict
 *   objects     .Values .Release.{Name,Namespace,Service} .Chart.{Name,Version,AppVersion}
 *               .Template.{Name,BasePath}; every file under templates/ is also a named template
 *               (as in Helm, for `include (print $.Template.BasePath "/x.yaml") .`).
 *
 * As Helm does, the values are checked against the chart's values.schema.json first (draft-07, with ajv).
 * A reference to a value that does not exist is an error (like `helm template --strict` plus
 * `missingkey=error`), so a template cannot silently read a misspelled key.
 *
 *   bun deploy/helm/render.ts deploy/helm/svc-agent [--namespace NS] [--name NAME] [--set a.b=v ...] [-f values.yaml]
 */
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import Ajv, { type ValidateFunction } from "ajv";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";

/** Thrown for template syntax errors, unknown functions, missing values and failed `required`. */
export class TemplateError extends Error {
  override name = "TemplateError";
}

type Value = unknown;
type Scope = Map<string, Value>;

interface TextNode { kind: "text"; text: string }
interface ActionNode { kind: "action"; pipe: Pipeline; declare?: string[] }
interface IfNode { kind: "if"; branches: Array<{ cond: Pipeline | null; body: Node[] }> }
interface WithNode { kind: "with"; pipe: Pipeline; body: Node[]; otherwise: Node[] }
interface RangeNode { kind: "range"; vars: string[]; pipe: Pipeline; body: Node[]; otherwise: Node[] }
type Node = TextNode | ActionNode | IfNode | WithNode | RangeNode;

type Operand =
  | { kind: "field"; base: "dot" | "root" | { var: string }; path: string[] }
  | { kind: "literal"; value: Value }
  | { kind: "sub"; pipe: Pipeline }
  | { kind: "ident"; name: string };
interface Command { operands: Operand[] }
interface Pipeline { commands: Command[] }

// ---------- lexing ----------

interface Piece { kind: "text"; text: string }
interface ActionPiece { kind: "action"; body: string; at: number }

function split(src: string, file: string): Array<Piece | ActionPiece> {
  const out: Array<Piece | ActionPiece> = [];
  let i = 0;
  let trimNextText = false;
  while (i < src.length) {
    const open = src.indexOf("{{", i);
    let text = src.slice(i, open === -1 ? src.length : open);
    if (trimNextText) text = text.replace(/^\s+/, "");
    trimNextText = false;
    if (open === -1) {
      out.push({ kind: "text", text });
      break;
    }
    let start = open + 2;
    if (src.startsWith("- ", start) || src.startsWith("-\n", start) || src.startsWith("-\t", start)) {
      text = text.replace(/\s+$/, "");
      start += 1;
    }
    out.push({ kind: "text", text });
    let close: number;
    if (src.slice(start).trimStart().startsWith("/*")) {
      const end = src.indexOf("*/", start);
      if (end === -1) throw new TemplateError(`${file}: unclosed comment at ${open}`);
      close = src.indexOf("}}", end);
    } else close = findClose(src, start);
    if (close === -1) throw new TemplateError(`${file}: unclosed action at ${open}`);
    let body = src.slice(start, close);
    if (/\s-$/.test(body)) {
      body = body.slice(0, -1);
      trimNextText = true;
    }
    if (!body.trim().startsWith("/*")) out.push({ kind: "action", body: body.trim(), at: open });
    i = close + 2;
  }
  return out;
}

/** Index of the `}}` closing an action, skipping string literals. */
function findClose(src: string, from: number): number {
  for (let i = from; i < src.length; i++) {
    const c = src[i];
    if (c === '"') {
      for (i++; i < src.length && src[i] !== '"'; i++) if (src[i] === "\\") i++;
    } else if (c === "`") {
      i = src.indexOf("`", i + 1);
      if (i === -1) return -1;
    } else if (c === "}" && src[i + 1] === "}") return i;
  }
  return -1;
}

type Token = { t: "field"; path: string[]; base: "dot" | "root" | { var: string } } | { t: "lit"; v: Value } | { t: "ident"; v: string } | { t: "punct"; v: string } | { t: "var"; v: string };

function tokenize(s: string, where: string): Token[] {
  const toks: Token[] = [];
  let i = 0;
  const fieldChain = (): string[] => {
    const path: string[] = [];
    while (s[i] === "." && /[A-Za-z_]/.test(s[i + 1] ?? "")) {
      const m = /^\.([A-Za-z_][A-Za-z0-9_]*)/.exec(s.slice(i))!;
      path.push(m[1]!);
      i += m[0].length;
    }
    return path;
  };
  while (i < s.length) {
    const c = s[i]!;
    if (/\s/.test(c)) { i++; continue; }
    if (c === '"') {
      let j = i + 1;
      for (; j < s.length && s[j] !== '"'; j++) if (s[j] === "\\") j++;
      toks.push({ t: "lit", v: JSON.parse(s.slice(i, j + 1)) as string });
      i = j + 1;
      continue;
    }
    if (c === "`") {
      const j = s.indexOf("`", i + 1);
      toks.push({ t: "lit", v: s.slice(i + 1, j) });
      i = j + 1;
      continue;
    }
    if (s.startsWith(":=", i)) { toks.push({ t: "punct", v: ":=" }); i += 2; continue; }
    if ("|(),=".includes(c)) { toks.push({ t: "punct", v: c }); i++; continue; }
    if (c === "." ) {
      if (/[A-Za-z_]/.test(s[i + 1] ?? "")) toks.push({ t: "field", base: "dot", path: fieldChain() });
      else { toks.push({ t: "field", base: "dot", path: [] }); i++; }
      continue;
    }
    if (c === "$") {
      const m = /^\$([A-Za-z_][A-Za-z0-9_]*)?/.exec(s.slice(i))!;
      i += m[0].length;
      const name = m[1];
      const path = fieldChain();
      if (name === undefined) toks.push({ t: "field", base: "root", path });
      else if (path.length === 0 && (s.slice(i).trimStart().startsWith(":=") || s.slice(i).trimStart().startsWith(","))) toks.push({ t: "var", v: name });
      else toks.push({ t: "field", base: { var: name }, path });
      continue;
    }
    const num = /^-?\d+(\.\d+)?/.exec(s.slice(i));
    if (num) { toks.push({ t: "lit", v: Number(num[0]) }); i += num[0].length; continue; }
    const id = /^[A-Za-z_][A-Za-z0-9_]*/.exec(s.slice(i));
    if (id) {
      i += id[0].length;
      const w = id[0];
      if (w === "true" || w === "false") toks.push({ t: "lit", v: w === "true" });
      else if (w === "nil") toks.push({ t: "lit", v: null });
      else toks.push({ t: "ident", v: w });
      const path = fieldChain();
      if (path.length) throw new TemplateError(`${where}: field access on a function result is not supported`);
      continue;
    }
    throw new TemplateError(`${where}: unexpected character ${JSON.stringify(c)} in {{ ${s} }}`);
  }
  return toks;
}

function parsePipeline(toks: Token[], pos: { i: number }, where: string, inParens = false): Pipeline {
  const commands: Command[] = [];
  let operands: Operand[] = [];
  for (;;) {
    const tok = toks[pos.i];
    if (tok === undefined || (tok.t === "punct" && tok.v === ")")) {
      if (tok !== undefined && !inParens) throw new TemplateError(`${where}: unexpected )`);
      break;
    }
    pos.i++;
    if (tok.t === "punct" && tok.v === "|") {
      if (!operands.length) throw new TemplateError(`${where}: empty command before |`);
      commands.push({ operands });
      operands = [];
    } else if (tok.t === "punct" && tok.v === "(") {
      const pipe = parsePipeline(toks, pos, where, true);
      if (toks[pos.i]?.t !== "punct" || (toks[pos.i] as { v: string }).v !== ")") throw new TemplateError(`${where}: missing )`);
      pos.i++;
      operands.push({ kind: "sub", pipe });
    } else if (tok.t === "field") operands.push({ kind: "field", base: tok.base, path: tok.path });
    else if (tok.t === "lit") operands.push({ kind: "literal", value: tok.v });
    else if (tok.t === "ident") operands.push({ kind: "ident", name: tok.v });
    else throw new TemplateError(`${where}: unexpected ${JSON.stringify(tok)}`);
  }
  if (operands.length) commands.push({ operands });
  if (!commands.length) throw new TemplateError(`${where}: empty pipeline`);
  return { commands };
}

function pipelineOf(text: string, where: string): { pipe: Pipeline; declare?: string[] } {
  const toks = tokenize(text, where);
  const declare: string[] = [];
  let i = 0;
  while (toks[i]?.t === "var") {
    declare.push((toks[i] as { v: string }).v);
    const next = toks[i + 1];
    i += 2;
    if (next?.t === "punct" && (next.v === ":=" || next.v === "=")) break;
    if (!(next?.t === "punct" && next.v === ",")) throw new TemplateError(`${where}: bad variable declaration`);
  }
  if (!declare.length) i = 0;
  const pos = { i };
  const pipe = parsePipeline(toks, pos, where);
  return declare.length ? { pipe, declare } : { pipe };
}

// ---------- parsing ----------

interface Template { name: string; body: Node[] }

function parseTemplate(src: string, file: string, defines: Map<string, Template>): Node[] {
  const pieces = split(src, file);
  let k = 0;
  const where = (p: ActionPiece) => `${file}:${src.slice(0, p.at).split("\n").length}`;
  const parseList = (terminators: string[]): { nodes: Node[]; end: string; endPiece?: ActionPiece } => {
    const nodes: Node[] = [];
    while (k < pieces.length) {
      const p = pieces[k++]!;
      if (p.kind === "text") {
        if (p.text) nodes.push({ kind: "text", text: p.text });
        continue;
      }
      const word = /^[a-z]+/.exec(p.body)?.[0] ?? "";
      const rest = p.body.slice(word.length).trim();
      if (terminators.includes(word)) return { nodes, end: word, endPiece: p };
      if (word === "if") {
        const branches: IfNode["branches"] = [{ cond: pipelineOf(rest, where(p)).pipe, body: [] }];
        for (;;) {
          const r = parseList(["else", "end"]);
          branches[branches.length - 1]!.body = r.nodes;
          if (r.end === "end") break;
          const elseRest = r.endPiece!.body.slice(4).trim();
          if (elseRest.startsWith("if ")) branches.push({ cond: pipelineOf(elseRest.slice(3), where(r.endPiece!)).pipe, body: [] });
          else {
            const last = parseList(["end"]);
            branches.push({ cond: null, body: last.nodes });
            break;
          }
        }
        nodes.push({ kind: "if", branches });
      } else if (word === "with" || word === "range") {
        const parsed = pipelineOf(rest, where(p));
        const body = parseList(["else", "end"]);
        const otherwise = body.end === "else" ? parseList(["end"]).nodes : [];
        if (word === "with") nodes.push({ kind: "with", pipe: parsed.pipe, body: body.nodes, otherwise });
        else nodes.push({ kind: "range", vars: parsed.declare ?? [], pipe: parsed.pipe, body: body.nodes, otherwise });
      } else if (word === "define") {
        const name = JSON.parse(rest) as string;
        const body = parseList(["end"]);
        defines.set(name, { name, body: body.nodes });
      } else if (["else", "end", "block", "template", "break", "continue"].includes(word) && /^(else|end|block|template|break|continue)\b/.test(p.body)) {
        throw new TemplateError(`${where(p)}: unexpected or unsupported {{ ${word} }}`);
      } else {
        const parsed = pipelineOf(p.body, where(p));
        nodes.push({ kind: "action", ...parsed });
      }
    }
    if (terminators.length) throw new TemplateError(`${file}: missing {{ end }}`);
    return { nodes, end: "" };
  };
  return parseList([]).nodes;
}

// ---------- evaluation ----------

function truthy(v: Value): boolean {
  if (v === null || v === undefined || v === false || v === 0 || v === "") return false;
  if (Array.isArray(v)) return v.length > 0;
  if (typeof v === "object") return Object.keys(v as object).length > 0;
  return true;
}

function show(v: Value): string {
  if (v === null || v === undefined) return "";
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  if (Array.isArray(v)) return `[${v.map(show).join(" ")}]`;
  return `map[${Object.keys(v as object).sort().map((k) => `${k}:${show((v as Record<string, Value>)[k])}`).join(" ")}]`;
}

function toYaml(v: Value): string {
  if (v === null || v === undefined) return "null";
  return stringifyYaml(v, { sortMapEntries: true, lineWidth: 0 }).replace(/\n$/, "");
}

function indentText(n: number, s: string): string {
  const pad = " ".repeat(n);
  return s.split("\n").map((l) => pad + l).join("\n");
}

function printf(format: string, args: Value[]): string {
  let k = 0;
  return format.replace(/%([sdvq%])/g, (_m, verb: string) => {
    if (verb === "%") return "%";
    const a = args[k++];
    if (verb === "q") return JSON.stringify(show(a));
    if (verb === "d") return String(Math.trunc(Number(a)));
    return show(a);
  });
}

interface Ctx {
  root: Value;
  defines: Map<string, Template>;
  strict: boolean;
  depth: number;
}

export class Renderer {
  #defines = new Map<string, Template>();
  readonly #funcs: Record<string, (ctx: Ctx, args: Value[]) => Value>;

  constructor() {
    const str = (v: Value) => show(v);
    this.#funcs = {
      default: (_c, [d, v]) => (truthy(v) ? v : d),
      quote: (_c, args) => args.map((a) => JSON.stringify(str(a))).join(" "),
      squote: (_c, args) => args.map((a) => `'${str(a)}'`).join(" "),
      toYaml: (_c, [v]) => toYaml(v),
      nindent: (_c, [n, s]) => `\n${indentText(Number(n), str(s))}`,
      indent: (_c, [n, s]) => indentText(Number(n), str(s)),
      printf: (_c, [f, ...rest]) => printf(str(f), rest),
      print: (_c, args) => args.map(str).join(""),
      trunc: (_c, [n, s]) => str(s).slice(0, Number(n)),
      trimSuffix: (_c, [suf, s]) => (str(s).endsWith(str(suf)) ? str(s).slice(0, -str(suf).length || undefined) : str(s)),
      replace: (_c, [a, b, s]) => str(s).split(str(a)).join(str(b)),
      lower: (_c, [s]) => str(s).toLowerCase(),
      sha256sum: (_c, [s]) => createHash("sha256").update(str(s)).digest("hex"),
      b64enc: (_c, [s]) => Buffer.from(str(s)).toString("base64"),
      splitList: (_c, [sep, s]) => str(s).split(str(sep)),
      last: (_c, [l]) => (Array.isArray(l) ? l[l.length - 1] : undefined),
      int: (_c, [v]) => {
        const n = Math.trunc(Number(v));
        if (Number.isNaN(n)) throw new TemplateError(`int: ${JSON.stringify(v)} is not a number`);
        return n;
      },
      toString: (_c: Ctx, [v]: Value[]) => str(v),
      eq: (_c, [a, ...bs]) => bs.some((b) => a === b),
      ne: (_c, [a, b]) => a !== b,
      not: (_c, [v]) => !truthy(v),
      and: (_c, args) => args.find((a) => !truthy(a)) ?? args[args.length - 1],
      or: (_c, args) => args.find((a) => truthy(a)) ?? args[args.length - 1],
      empty: (_c, [v]) => !truthy(v),
      required: (_c, [msg, v]) => {
        if (!truthy(v)) throw new TemplateError(`required: ${str(msg)}`);
        return v;
      },
      hasKey: (_c, [m, k]) => typeof m === "object" && m !== null && Object.hasOwn(m, str(k)),
      list: (_c, args) => args,
      dict: (_c, args) => {
        const o: Record<string, Value> = {};
        for (let i = 0; i + 1 < args.length; i += 2) o[str(args[i])] = args[i + 1];
        return o;
      },
      include: (c, [name, dot]) => this.#renderNamed(c, str(name), dot),
    };
  }

  /** Registers the named templates of `src` (and `src` itself under `name`). */
  add(name: string, src: string): void {
    const body = parseTemplate(src, name, this.#defines);
    this.#defines.set(name, { name, body });
  }

  /** Renders the template registered as `name` with `root` as both `.` and `$`. */
  render(name: string, root: Value, strict = true): string {
    return this.#renderNamed({ root, defines: this.#defines, strict, depth: 0 }, name, root);
  }

  #renderNamed(ctx: Ctx, name: string, dot: Value): string {
    const t = this.#defines.get(name);
    if (!t) throw new TemplateError(`no template named ${JSON.stringify(name)}`);
    if (ctx.depth > 100) throw new TemplateError(`include nesting too deep at ${name}`);
    const inner = { ...ctx, root: dot, depth: ctx.depth + 1 };
    return this.#exec(inner, t.body, dot, new Map([["", dot]]), name);
  }

  #exec(ctx: Ctx, nodes: Node[], dot: Value, scope: Scope, where: string): string {
    let out = "";
    const vars = new Map(scope);
    for (const n of nodes) {
      if (n.kind === "text") out += n.text;
      else if (n.kind === "action") {
        const v = this.#pipe(ctx, n.pipe, dot, vars, where);
        if (n.declare) vars.set(n.declare[0]!, v);
        else out += show(v);
      } else if (n.kind === "if") {
        for (const b of n.branches) {
          if (b.cond === null || truthy(this.#pipe(ctx, b.cond, dot, vars, where))) {
            out += this.#exec(ctx, b.body, dot, vars, where);
            break;
          }
        }
      } else if (n.kind === "with") {
        const v = this.#pipe(ctx, n.pipe, dot, vars, where);
        out += truthy(v) ? this.#exec(ctx, n.body, v, vars, where) : this.#exec(ctx, n.otherwise, dot, vars, where);
      } else {
        const v = this.#pipe(ctx, n.pipe, dot, vars, where);
        const entries: Array<[Value, Value]> = Array.isArray(v)
          ? v.map((x, i) => [i, x])
          : v && typeof v === "object"
            ? Object.keys(v).sort().map((k) => [k, (v as Record<string, Value>)[k]])
            : [];
        if (!entries.length) out += this.#exec(ctx, n.otherwise, dot, vars, where);
        for (const [k, x] of entries) {
          const inner = new Map(vars);
          if (n.vars.length === 1) inner.set(n.vars[0]!, x);
          if (n.vars.length === 2) {
            inner.set(n.vars[0]!, k);
            inner.set(n.vars[1]!, x);
          }
          out += this.#exec(ctx, n.body, x, inner, where);
        }
      }
    }
    return out;
  }

  #pipe(ctx: Ctx, pipe: Pipeline, dot: Value, vars: Scope, where: string): Value {
    let acc: Value = undefined;
    pipe.commands.forEach((cmd, i) => {
      acc = this.#command(ctx, cmd, dot, vars, where, i > 0 ? [acc] : []);
    });
    return acc;
  }

  #command(ctx: Ctx, cmd: Command, dot: Value, vars: Scope, where: string, piped: Value[]): Value {
    const [head, ...rest] = cmd.operands;
    if (head!.kind === "ident") {
      const fn = Object.hasOwn(this.#funcs, head!.name) ? this.#funcs[head!.name] : undefined;
      if (!fn) throw new TemplateError(`${where}: unknown function ${head!.name}`);
      const args = rest.map((o) => this.#operand(ctx, o, dot, vars, where));
      return fn(ctx, [...args, ...piped]);
    }
    if (rest.length || piped.length) throw new TemplateError(`${where}: only functions take arguments`);
    return this.#operand(ctx, head!, dot, vars, where);
  }

  #operand(ctx: Ctx, o: Operand, dot: Value, vars: Scope, where: string): Value {
    if (o.kind === "literal") return o.value;
    if (o.kind === "sub") return this.#pipe(ctx, o.pipe, dot, vars, where);
    if (o.kind === "ident") {
      const fn = Object.hasOwn(this.#funcs, o.name) ? this.#funcs[o.name] : undefined;
      if (!fn) throw new TemplateError(`${where}: unknown function ${o.name}`);
      return fn(ctx, []);
    }
    let base: Value;
    let label: string;
    if (o.base === "dot") [base, label] = [dot, "."];
    else if (o.base === "root") [base, label] = [vars.get("") ?? ctx.root, "$"];
    else {
      if (!vars.has(o.base.var)) throw new TemplateError(`${where}: undefined variable $${o.base.var}`);
      [base, label] = [vars.get(o.base.var), `$${o.base.var}`];
    }
    for (const key of o.path) {
      label += `.${key}`;
      if (base === null || typeof base !== "object" || !Object.hasOwn(base, key)) {
        if (ctx.strict) throw new TemplateError(`${where}: ${label} does not exist`);
        return undefined;
      }
      base = (base as Record<string, Value>)[key];
    }
    return base;
  }
}

// ---------- charts ----------

export interface RenderOptions {
  /** Release name (default: the chart name). */
  name?: string;
  namespace?: string;
  /** Values merged over values.yaml (deeply; arrays are replaced). */
  values?: Record<string, unknown>;
}

export interface RenderedChart {
  /** Output of each template file that rendered to something, keyed by path (templates/x.yaml). */
  files: Map<string, string>;
  /** The parsed objects of every file, in file order. */
  objects: Array<Record<string, unknown>>;
  /** The values used (values.yaml merged with the overrides). */
  values: Record<string, unknown>;
}

export function mergeValues(base: Record<string, unknown>, over: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) {
    const b = out[k];
    out[k] =
      v && typeof v === "object" && !Array.isArray(v) && b && typeof b === "object" && !Array.isArray(b)
        ? mergeValues(b as Record<string, unknown>, v as Record<string, unknown>)
        : v;
  }
  return out;
}

/** `a.b.c=v` as Helm's --set reads it (v parsed as a YAML scalar). */
export function setValue(values: Record<string, unknown>, assignment: string): Record<string, unknown> {
  const eq = assignment.indexOf("=");
  if (eq < 1) throw new TemplateError(`--set expects key=value, got ${assignment}`);
  const keys = assignment.slice(0, eq).split(".");
  let leaf: unknown = parseYaml(assignment.slice(eq + 1));
  for (const k of keys.reverse()) leaf = { [k]: leaf };
  return mergeValues(values, leaf as Record<string, unknown>);
}

const schemaValidators = new Map<string, ValidateFunction | null>();

/** Checks `values` against the chart's values.schema.json, when it has one; throws TemplateError listing the problems. */
function checkValuesSchema(chartDir: string, values: Record<string, unknown>): void {
  let validate = schemaValidators.get(chartDir);
  if (validate === undefined) {
    const path = join(chartDir, "values.schema.json");
    validate = existsSync(path) ? new Ajv({ strict: false, allErrors: true }).compile(JSON.parse(readFileSync(path, "utf8"))) : null;
    schemaValidators.set(chartDir, validate);
  }
  if (validate && !validate(values)) {
    const problems = (validate.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message ?? "invalid"}${e.params && "additionalProperty" in e.params ? ` (${String(e.params.additionalProperty)})` : ""}`);
    throw new TemplateError(`values don't meet the chart's values.schema.json:\n  ${[...new Set(problems)].join("\n  ")}`);
  }
}

/** Renders every template of the chart at `chartDir` as `helm template` would (documents split on ---). */
export function renderChart(chartDir: string, options: RenderOptions = {}): RenderedChart {
  const chart = parseYaml(readFileSync(join(chartDir, "Chart.yaml"), "utf8")) as Record<string, unknown>;
  const defaults = (parseYaml(readFileSync(join(chartDir, "values.yaml"), "utf8")) ?? {}) as Record<string, unknown>;
  const values = mergeValues(defaults, options.values ?? {});
  checkValuesSchema(chartDir, values);
  const renderer = new Renderer();
  const dir = join(chartDir, "templates");
  const names = readdirSync(dir).sort();
  for (const f of names) renderer.add(`${String(chart.name)}/templates/${f}`, readFileSync(join(dir, f), "utf8"));
  const files = new Map<string, string>();
  const objects: Array<Record<string, unknown>> = [];
  for (const f of names) {
    if (f.startsWith("_") || !/\.ya?ml$/.test(f)) continue;
    const root = {
      Values: values,
      Release: { Name: options.name ?? String(chart.name), Namespace: options.namespace ?? "default", Service: "Helm" },
      Chart: { Name: chart.name, Version: chart.version, AppVersion: chart.appVersion },
      Template: { Name: `${String(chart.name)}/templates/${f}`, BasePath: `${String(chart.name)}/templates` },
    };
    const text = renderer.render(`${String(chart.name)}/templates/${f}`, root);
    if (text.trim() === "") continue;
    files.set(`templates/${f}`, text);
    for (const doc of text.split(/^---\s*$/m)) {
      const obj = parseYaml(doc) as Record<string, unknown> | null;
      if (obj) objects.push(obj);
    }
  }
  return { files, objects, values };
}

/** Renders templates/NOTES.txt (what helm prints after install), or undefined when the chart has none. */
export function renderNotes(chartDir: string, options: RenderOptions = {}): string | undefined {
  const path = join(chartDir, "templates", "NOTES.txt");
  if (!existsSync(path)) return undefined;
  const chart = parseYaml(readFileSync(join(chartDir, "Chart.yaml"), "utf8")) as Record<string, unknown>;
  const values = mergeValues((parseYaml(readFileSync(join(chartDir, "values.yaml"), "utf8")) ?? {}) as Record<string, unknown>, options.values ?? {});
  checkValuesSchema(chartDir, values);
  const renderer = new Renderer();
  const dir = join(chartDir, "templates");
  for (const f of readdirSync(dir).sort()) renderer.add(`${String(chart.name)}/templates/${f}`, readFileSync(join(dir, f), "utf8"));
  return renderer.render(`${String(chart.name)}/templates/NOTES.txt`, {
    Values: values,
    Release: { Name: options.name ?? String(chart.name), Namespace: options.namespace ?? "default", Service: "Helm" },
    Chart: { Name: chart.name, Version: chart.version, AppVersion: chart.appVersion },
    Template: { Name: `${String(chart.name)}/templates/NOTES.txt`, BasePath: `${String(chart.name)}/templates` },
  });
}

/** The rendered chart as one multi-document YAML text, each file preceded by a `# Source:` line like helm's. */
export function renderChartText(chartDir: string, options: RenderOptions = {}): string {
  const chartName = basename(chartDir);
  const { files } = renderChart(chartDir, options);
  return [...files].map(([path, text]) => `---\n# Source: ${chartName}/${path}\n${text.trim()}\n`).join("");
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const chartDir = args.shift();
  if (!chartDir || !existsSync(join(chartDir, "Chart.yaml"))) {
    console.error("usage: bun deploy/helm/render.ts CHART_DIR [--name NAME] [--namespace NS] [--set a.b=v ...] [-f values.yaml ...]");
    process.exitCode = 2;
  } else {
    const opts: RenderOptions = { values: {} };
    while (args.length) {
      const flag = args.shift()!;
      const arg = args.shift() ?? "";
      if (flag === "--name") opts.name = arg;
      else if (flag === "--namespace" || flag === "-n") opts.namespace = arg;
      else if (flag === "--set") opts.values = setValue(opts.values!, arg);
      else if (flag === "-f" || flag === "--values") opts.values = mergeValues(opts.values!, parseYaml(readFileSync(arg, "utf8")) as Record<string, unknown>);
      else throw new TemplateError(`unknown flag ${flag}`);
    }
    try {
      process.stdout.write(renderChartText(chartDir, opts));
    } catch (e) {
      if (!(e instanceof TemplateError)) throw e;
      console.error(`Error: ${e.message}`);
      process.exitCode = 1;
    }
  }
}
