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
const JSON_CONTENT_TYPE = "application/json;charset=utf-8";
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
 * A writer of `schema`'s answers: `(set, status, body) => Response`. With `check` (tests) the body is checked
 * against the schema first (a mismatch is a 500 through the interface's error handler), as Elysia checks plain bodies.
 */
export function jsonAnswer<T extends TSchema>(
  schema: T,
  check: boolean,
  figures?: (body: Static<T>, out: unknown[]) => void,
): (set: AnswerSet, status: number, body: Static<T>) => Response {
  const checker = check ? TypeCompiler.Compile(schema) : undefined;
  // With `figures` (a writer of every leaf of the body, in a fixed order): the previous text and its leaves. An
  // answer whose leaves are all identical to the previous one's reuses its text instead of serialising again.
  let previous: unknown[] = [];
  let scratch: unknown[] = [];
  let previousText: string | undefined;
  return (set, status, body) => {
    if (checker && !checker.Check(body)) {
      const problems = [...checker.Errors(body)].map((e) => `${e.path} ${e.message}`).join("; ");
      throw new Error(`answer does not match its schema: ${problems}`);
    }
    if (!figures) return answerResponse(set, status, JSON.stringify(body), JSON_CONTENT_TYPE);
    scratch.length = 0;
    figures(body, scratch);
    if (previousText === undefined || !sameFigures(previous, scratch)) {
      previousText = JSON.stringify(body);
      [previous, scratch] = [scratch, previous];
    }
    return answerResponse(set, status, previousText, JSON_CONTENT_TYPE);
  };
}

/**
 * Every leaf of a JSON body, depth first in key order (an array adds its length first): a `figures` writer for
 * bodies that are always built with one shape, so that equal leaves mean equal text.
 */
export function figuresOf(body: unknown, out: unknown[]): void {
  if (body === null || typeof body !== "object") {
    out.push(body);
    return;
  }
  if (Array.isArray(body)) {
    out.push(body.length);
    for (const v of body) figuresOf(v, out);
    return;
  }
  for (const k in body) figuresOf((body as Record<string, unknown>)[k], out);
}

function sameFigures(a: unknown[], b: unknown[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
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
