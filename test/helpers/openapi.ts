/**
 * Checks live answers against the agent's own OpenAPI document: finds the operation for a path and
 * method, and validates status code, content type and JSON body against the documented schema (ajv, 2020-12).
 */
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import { parseDuration, parseSize } from "../../src/config/units";

type Doc = {
  paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, { schema?: unknown }> }> }>>;
  components?: { schemas?: Record<string, unknown> };
};

export class OpenApiChecker {
  readonly #ajv: Ajv2020;
  readonly #doc: Doc;
  readonly #compiled = new Map<unknown, ReturnType<Ajv2020["compile"]>>();

  constructor(doc: unknown) {
    this.#doc = doc as Doc;
    this.#ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats(this.#ajv);
    // The configuration view documents durations and sizes with the formats the config loader checks.
    this.#ajv.addFormat("duration", (v: string) => parseDuration(v) !== undefined);
    this.#ajv.addFormat("size", (v: string) => parseSize(v) !== undefined);
    for (const [name, schema] of Object.entries(this.#doc.components?.schemas ?? {})) {
      this.#ajv.addSchema(schema as object, `#/components/schemas/${name}`);
    }
  }

  /** The documented path template matching a concrete path, or undefined. */
  template(path: string): string | undefined {
    for (const t of Object.keys(this.#doc.paths)) {
      const re = new RegExp("^" + t.replace(/\{[^}]+\}/g, "[^/]+") + "$");
      if (re.test(path)) return t;
    }
    return undefined;
  }

  /** Returns a list of mismatches (empty when the answer matches the document). */
  async check(method: string, path: string, response: Response): Promise<string[]> {
    const t = this.template(path);
    if (!t) return [`${path}: not documented`];
    const op = this.#doc.paths[t]![method.toLowerCase()];
    if (!op) return [`${method} ${t}: not documented`];
    const r = op.responses[String(response.status)];
    if (!r) return [`${method} ${t}: status ${response.status} not documented (documented: ${Object.keys(op.responses).join(", ")})`];
    const type = (response.headers.get("content-type") ?? "").split(";")[0]!.trim();
    if (type !== "application/json") return [];
    const media = r.content?.["application/json"];
    if (!media?.schema) return [];
    let validate = this.#compiled.get(media.schema);
    if (!validate) {
      validate = this.#ajv.compile(media.schema as object);
      this.#compiled.set(media.schema, validate);
    }
    const body = await response.clone().json();
    if (validate(body)) return [];
    return (validate.errors ?? []).map((e) => `${method} ${path} ${response.status}: ${e.instancePath} ${e.message}`);
  }
}
