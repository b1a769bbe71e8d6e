/**
 * Kubernetes API requests over Bun's fetch: list (one page per call, following `continue`) and watch
 * (a newline-delimited JSON stream). Measured: @kubernetes/client-node 2.0.1's own transport sends its
 * requests through `undici` with a dispatcher that carries the cluster CA, and Bun's fetch ignores that
 * dispatcher, so TLS to an API server with a private CA fails (DEPTH_ZERO_SELF_SIGNED_CERT); its
 * KubeConfig is used for configuration, and requests go through Bun's fetch with `tls: { ca, cert, key }`.
 */
import { parseJsonLines } from "../json-lines";
import type { KubeConnection } from "./connection";

/** Longest a list request may take. */
export const LIST_TIMEOUT_MS = 30_000;
/** Items per list page. */
export const LIST_PAGE_LIMIT = 500;

export interface KubeObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  labels?: Record<string, string>;
  ownerReferences?: Array<{ kind: string; name: string; controller?: boolean }>;
}

export interface KubeList<T> {
  metadata?: { resourceVersion?: string; continue?: string };
  items: T[];
}

export interface WatchEvent<T> {
  type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR";
  object: T & { metadata?: KubeObjectMeta; code?: number; reason?: string; message?: string };
}

/** The API answered with an error status (from the HTTP status or a Status object). */
export class KubeApiError extends Error {
  constructor(
    readonly status: number,
    readonly path: string,
    message: string,
  ) {
    super(`kubernetes: ${path}: ${status === 0 ? message : `HTTP ${status}: ${message}`}`);
    this.name = "KubeApiError";
  }
}

export class KubeApiClient {
  constructor(readonly connection: KubeConnection) {}

  /** `idleMs`: Bun's socket idle timer for this request (undefined: Bun's default of 5 minutes). */
  async #get(path: string, query: Record<string, string>, signal: AbortSignal, idleMs?: number): Promise<Response> {
    const url = new URL(this.connection.server + path);
    for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
    const creds = this.connection.credentials();
    const headers: Record<string, string> = { accept: "application/json" };
    if (creds.token) headers.authorization = `Bearer ${creds.token}`;
    let res: Response;
    try {
      res = await fetch(url, { headers, signal, ...(idleMs ? { timeout: idleMs } : {}), ...(creds.tls ? { tls: creds.tls } : {}) } as RequestInit);
    } catch (e) {
      if (signal.aborted) {
        if ((signal.reason as Error | undefined)?.name === "TimeoutError") throw new KubeApiError(0, path, `timed out (${this.connection.server})`);
        throw e;
      }
      const err = e as { code?: string; message?: string; name?: string };
      throw new KubeApiError(0, path, err.name === "TimeoutError" ? "timed out" : `${err.code ?? err.message} ${this.connection.server}`);
    }
    if (!res.ok) {
      const text = await res.text().catch(() => "");
      let message = text.trim().slice(0, 200) || res.statusText;
      try {
        message = (JSON.parse(text) as { message?: string }).message ?? message;
      } catch {
        // not a Status object: keep the text
      }
      if (res.status === 401) this.connection.invalidate();
      throw new KubeApiError(res.status, path, message);
    }
    return res;
  }

  /** Lists every page of `path`; resolves with the items and the list's resourceVersion. */
  async list<T>(path: string, query: Record<string, string>, signal: AbortSignal): Promise<{ items: T[]; resourceVersion: string }> {
    const items: T[] = [];
    let cont: string | undefined;
    let resourceVersion = "";
    do {
      const q: Record<string, string> = { ...query, limit: String(LIST_PAGE_LIMIT), ...(cont ? { continue: cont } : {}) };
      const res = await this.#get(path, q, AbortSignal.any([signal, AbortSignal.timeout(LIST_TIMEOUT_MS)]));
      const page = (await res.json()) as KubeList<T>;
      items.push(...(page.items ?? []));
      resourceVersion = page.metadata?.resourceVersion ?? resourceVersion;
      cont = page.metadata?.continue || undefined;
    } while (cont);
    return { items, resourceVersion };
  }

  /**
   * Opens a watch; resolves once the server accepted it, with its events (ends when the server closes it).
   * `idleMs` bounds silence on the connection (a half-open connection is noticed after it).
   */
  async watch<T>(path: string, query: Record<string, string>, signal: AbortSignal, idleMs?: number): Promise<AsyncIterable<WatchEvent<T>>> {
    // The answer's headers must come within LIST_TIMEOUT_MS; after that the stream may stay quiet (bounded by idleMs).
    const headers = new AbortController();
    const timer = setTimeout(() => headers.abort(new DOMException("watch not answered", "TimeoutError")), LIST_TIMEOUT_MS);
    let res: Response;
    try {
      res = await this.#get(path, { ...query, watch: "true" }, AbortSignal.any([signal, headers.signal]), idleMs);
    } catch (e) {
      if (headers.signal.aborted && !signal.aborted) throw new KubeApiError(0, path, `watch not answered within ${LIST_TIMEOUT_MS}ms`);
      throw e;
    } finally {
      clearTimeout(timer);
    }
    if (!res.body) throw new KubeApiError(res.status, path, "watch answer without body");
    return parseJsonLines<WatchEvent<T>>(res.body);
  }
}
