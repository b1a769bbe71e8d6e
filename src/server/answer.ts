/**
 * Answers built as Responses with the interface's headers, for the hot routes: JSON of the bodies the route builds
 * field by field (/healthz, /ready, /status) and the metrics text. When no hook added headers, Elysia hands a
 * Response over as is; a plain body would make it build the answer from its per-request header object, converted
 * for every answer.
 */
import type { Static, TSchema } from "@sinclair/typebox";
import { TypeCompiler } from "@sinclair/typebox/compiler";
import type { Context } from "elysia";

/** On every answer of the interface. */
export const SECURITY_HEADERS = { "x-content-type-options": "nosniff", "cache-control": "no-store" } as const;
export const JSON_CONTENT_TYPE = "application/json;charset=utf-8";
/** Prebuilt Headers per content type: each Response made from one copies it (Bun copies a Headers init); never changed. */
const prebuilt = new Map<string, Headers>();

type AnswerSet = Context["set"];

/** Whether `headers` holds exactly the security headers (nothing else added them anything, e.g. CORS). */
function onlySecurityHeaders(headers: AnswerSet["headers"]): boolean {
  let n = 0;
  for (const _ in headers) n++;
  return n === 2 && headers["x-content-type-options"] === SECURITY_HEADERS["x-content-type-options"] && headers["cache-control"] === SECURITY_HEADERS["cache-control"];
}

/**
 * A check of answers against `schema` (tests: ServerOptions.checkAnswers): throws on a mismatch, which the interface's
 * error handler answers with a 500, as Elysia checks plain bodies.
 */
export function checkerOf<T extends TSchema>(schema: T): (body: unknown) => void {
  const checker = TypeCompiler.Compile(schema);
  return (body) => {
    if (!checker.Check(body)) {
      const problems = [...checker.Errors(body)].map((e) => `${e.path} ${e.message}`).join("; ");
      throw new Error(`answer does not match its schema: ${problems}`);
    }
  };
}

/**
 * A writer of `schema`'s answers: `(set, status, body) => Response`. With `check` (tests) the body is checked
 * against the schema first (checkerOf).
 */
export function jsonAnswer<T extends TSchema>(schema: T, check: boolean): (set: AnswerSet, status: number, body: Static<T>) => Response {
  const checked = check ? checkerOf(schema) : undefined;
  return (set, status, body) => {
    checked?.(body);
    return answerResponse(set, status, JSON.stringify(body), JSON_CONTENT_TYPE);
  };
}

/**
 * A Response of `body` with the interface's headers and `contentType`, taking over `set.headers`: headers a hook
 * added (CORS) go with it (then the init is an object, converted as Elysia would); what later hooks add lands in a
 * fresh object that Elysia merges into it.
 */
export function answerResponse(set: AnswerSet, status: number, body: string | Uint8Array<ArrayBuffer>, contentType: string, gzip = false): Response {
  const extra = set.headers;
  const own: Record<string, string> = gzip ? { "content-type": contentType, "content-encoding": "gzip", vary: "Accept-Encoding" } : { "content-type": contentType };
  let headers: Headers | Record<string, string>;
  if (onlySecurityHeaders(extra)) {
    const key = gzip ? `${contentType}|gzip` : contentType;
    let h = prebuilt.get(key);
    if (!h) prebuilt.set(key, (h = new Headers({ ...own, ...SECURITY_HEADERS })));
    headers = h;
  } else headers = { ...(extra as Record<string, string>), ...own };
  set.headers = {};
  return new Response(body, { status, headers });
}
