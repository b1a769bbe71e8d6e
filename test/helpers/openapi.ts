/**
 * Checks live answers against the agent's own OpenAPI document with code the project did not write: ajv (JSON
 * Schema 2020-12) with ajv-formats' standard formats only (so `format: duration` means ISO 8601, as it does to any
 * other validator). For a path and method it finds the operation and checks the status is documented, the content
 * type is one the answer documents, documented required headers are present, and a JSON body matches its schema.
 * A path the document does not list must be a 404 and a method it does not list a 405 with Allow naming exactly the
 * documented methods, both checked against components.responses.
 */
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";

type Media = Record<string, { schema?: unknown }>;
type ResponseDoc = { $ref?: string; content?: Media; headers?: Record<string, { required?: boolean }> };
type Doc = {
  paths: Record<string, Record<string, { responses: Record<string, ResponseDoc> }>>;
  components?: { schemas?: Record<string, unknown>; responses?: Record<string, ResponseDoc> };
};

/** Answers of the guard, which runs before routing, by status: the components.responses that document them. */
const GUARD_ANSWERS: Record<number, string> = { 401: "Unauthorized", 413: "PayloadTooLarge", 429: "TooManyRequests" };

const baseType = (contentType: string) => contentType.split(";")[0]!.trim().toLowerCase();

export class OpenApiChecker {
  readonly #ajv: Ajv2020;
  readonly #doc: Doc;
  readonly #compiled = new Map<unknown, ReturnType<Ajv2020["compile"]>>();

  constructor(doc: unknown) {
    this.#doc = doc as Doc;
    this.#ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats(this.#ajv);
    for (const [name, schema] of Object.entries(this.#doc.components?.schemas ?? {})) {
      this.#ajv.addSchema(schema as object, `#/components/schemas/${name}`);
    }
  }

  /** The documented path template matching a concrete path, or undefined. */
  template(path: string): string | undefined {
    for (const t of Object.keys(this.#doc.paths)) {
      const re = new RegExp("^" + t.replace(/[.]/g, "\\.").replace(/\{[^}]+\}/g, "[^/]+") + "$");
      if (re.test(path)) return t;
    }
    return undefined;
  }

  /** The methods documented for a path template, upper case, sorted. */
  methods(template: string): string[] {
    return Object.keys(this.#doc.paths[template] ?? {})
      .map((m) => m.toUpperCase())
      .sort();
  }

  #shared(name: string): ResponseDoc | undefined {
    return this.#doc.components?.responses?.[name];
  }

  /**
   * Returns a list of mismatches (empty when the answer matches the document). `corsOn`: OPTIONS is answered on
   * every path (preflights, 204) and listed in Allow.
   */
  async check(method: string, path: string, response: Response, corsOn = false): Promise<string[]> {
    const what = `${method} ${path} ${response.status}`;
    if (corsOn && method === "OPTIONS" && response.status === 204) return [];
    const t = this.template(path);
    const guarded = GUARD_ANSWERS[response.status];
    if (!t) {
      // The guard answers before routing: these come from any path (components.responses).
      if (guarded) return this.#checkAgainst(what, { $ref: `#/components/responses/${guarded}` }, response);
      if (response.status !== 404) return [`${what}: path not documented, so 404 expected`];
      const shared = this.#shared("NotFound");
      return shared ? this.#checkAgainst(what, shared, response) : [`${what}: components.responses.NotFound missing`];
    }
    const op = this.#doc.paths[t]![method.toLowerCase()];
    if (!op) {
      if (guarded) return this.#checkAgainst(what, { $ref: `#/components/responses/${guarded}` }, response);
      if (response.status !== 405) return [`${what}: ${method} not documented on ${t}, so 405 expected`];
      const problems: string[] = [];
      const expected = corsOn ? [...this.methods(t), "OPTIONS"].sort() : this.methods(t);
      if (response.headers.get("allow") !== expected.join(", ")) problems.push(`${what}: Allow ${response.headers.get("allow")} is not the documented ${expected.join(", ")}`);
      const shared = this.#shared("MethodNotAllowed");
      if (!shared) return [...problems, `${what}: components.responses.MethodNotAllowed missing`];
      return [...problems, ...(await this.#checkAgainst(what, shared, response))];
    }
    const r = op.responses[String(response.status)];
    if (!r) return [`${what}: status not documented (documented: ${Object.keys(op.responses).join(", ")})`];
    return this.#checkAgainst(what, r, response);
  }

  async #checkAgainst(what: string, doc: ResponseDoc | undefined, response: Response): Promise<string[]> {
    if (!doc) return [`${what}: status not documented`];
    if (doc.$ref) doc = this.#shared(doc.$ref.replace("#/components/responses/", ""));
    if (!doc) return [`${what}: unresolved response reference`];
    const problems: string[] = [];
    for (const [name, h] of Object.entries(doc.headers ?? {}))
      if (h.required && response.headers.get(name) === null) problems.push(`${what}: documented header ${name} missing`);
    const content = doc.content ?? {};
    const documented = Object.keys(content);
    const live = response.headers.get("content-type");
    if (documented.length === 0) {
      if (live !== null && (await response.clone().arrayBuffer()).byteLength > 0) problems.push(`${what}: a ${live} body where none is documented`);
      return problems;
    }
    const key = live === null ? undefined : documented.find((k) => baseType(k) === baseType(live));
    if (key === undefined) return [...problems, `${what}: content type ${live} is not one of the documented ${documented.join(", ")}`];
    const schema = content[key]!.schema;
    if (baseType(key) !== "application/json" || !schema) return problems;
    let validate = this.#compiled.get(schema);
    if (!validate) {
      validate = this.#ajv.compile(schema as object);
      this.#compiled.set(schema, validate);
    }
    const body = await response.clone().json();
    if (validate(body)) return problems;
    return [...problems, ...(validate.errors ?? []).map((e) => `${what}: ${e.instancePath} ${e.message}`)];
  }
}
