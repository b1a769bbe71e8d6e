/**
 * A minimal Docker Engine API client over the unix socket (Bun's fetch with `unix`): list running
 * containers, inspect one, and follow the /events stream as parsed records.
 */
import { parseJsonLines } from "../json-lines";

/** Engine API version the paths are written against (1.41 = Docker 20.10; newer engines accept it). */
export const ENGINE_API_VERSION = "v1.41";
/** Longest a list or inspect request may take. */
export const REQUEST_TIMEOUT_MS = 10_000;

export interface EnginePort {
  PrivatePort: number;
  PublicPort?: number;
  Type: string;
  IP?: string;
}

/** One item of GET /containers/json. */
export interface EngineContainerSummary {
  Id: string;
  Names: string[];
  Image: string;
  ImageID: string;
  Labels: Record<string, string> | null;
  State: string;
  Ports: EnginePort[] | null;
  NetworkSettings?: { Networks?: Record<string, { IPAddress?: string; GlobalIPv6Address?: string }> | null } | null;
}

/** The parts of GET /containers/{id}/json that discovery uses. */
export interface EngineContainerInspect {
  Id: string;
  Name: string;
  Image: string;
  State: { Running: boolean; Pid: number };
  Config: { Image: string; Labels: Record<string, string> | null };
  NetworkSettings?: {
    Ports?: Record<string, Array<{ HostIp: string; HostPort: string }> | null> | null;
    Networks?: Record<string, { IPAddress?: string; GlobalIPv6Address?: string }> | null;
  };
}

/** One record of GET /events. */
export interface EngineEvent {
  Type: string;
  Action: string;
  Actor: { ID: string; Attributes: Record<string, string> };
  time: number;
}

/** The Engine API answered with an error status. */
export class EngineApiError extends Error {
  constructor(
    readonly status: number,
    readonly path: string,
    message: string,
  ) {
    super(`docker: ${path}: HTTP ${status}: ${message}`);
    this.name = "EngineApiError";
  }
}

/** The socket could not be reached (missing, refused, closed): `docker: connect ENOENT /var/run/docker.sock`. */
export class EngineConnectError extends Error {
  constructor(
    readonly code: string,
    readonly socket: string,
  ) {
    super(`docker: connect ${code} ${socket}`);
    this.name = "EngineConnectError";
  }
}

export class EngineClient {
  constructor(readonly socket: string) {}

  /** `idle`: Bun's socket idle timer (default 5 minutes); false for the event stream, which may stay quiet for hours. */
  async #get(path: string, signal: AbortSignal, idle = true): Promise<Response> {
    let res: Response;
    try {
      res = await fetch(`http://docker/${ENGINE_API_VERSION}${path}`, { unix: this.socket, signal, timeout: idle } as RequestInit);
    } catch (e) {
      if (signal.aborted) {
        if ((signal.reason as Error | undefined)?.name === "TimeoutError") throw new EngineConnectError("ETIMEDOUT", this.socket);
        throw e;
      }
      const code = (e as { code?: string }).code ?? (e as Error).message;
      throw new EngineConnectError(code, this.socket);
    }
    if (!res.ok) {
      const body = await res.text().catch(() => "");
      let message = body.trim();
      try {
        message = (JSON.parse(body) as { message?: string }).message ?? message;
      } catch {
        // not JSON: keep the text
      }
      throw new EngineApiError(res.status, path.split("?")[0]!, message);
    }
    return res;
  }

  /** Running containers. */
  async list(signal: AbortSignal): Promise<EngineContainerSummary[]> {
    const res = await this.#get("/containers/json", AbortSignal.any([signal, AbortSignal.timeout(REQUEST_TIMEOUT_MS)]));
    return (await res.json()) as EngineContainerSummary[];
  }

  /** One container; undefined when it no longer exists (404). */
  async inspect(id: string, signal: AbortSignal): Promise<EngineContainerInspect | undefined> {
    try {
      const res = await this.#get(`/containers/${encodeURIComponent(id)}/json`, AbortSignal.any([signal, AbortSignal.timeout(REQUEST_TIMEOUT_MS)]));
      return (await res.json()) as EngineContainerInspect;
    } catch (e) {
      if (e instanceof EngineApiError && e.status === 404) return undefined;
      throw e;
    }
  }

  /**
   * Opens the container event stream (start, die, destroy, rename). Resolves once the engine accepted it,
   * with an iterator of events that ends when the stream closes (or throws when it breaks) or `signal` aborts.
   */
  async events(signal: AbortSignal): Promise<AsyncIterable<EngineEvent>> {
    const filters = JSON.stringify({ type: ["container"], event: ["start", "die", "destroy", "rename"] });
    const headers = new AbortController();
    const timer = setTimeout(() => headers.abort(new DOMException(`no answer to /events within ${REQUEST_TIMEOUT_MS}ms`, "TimeoutError")), REQUEST_TIMEOUT_MS);
    let res: Response;
    try {
      res = await this.#get(`/events?filters=${encodeURIComponent(filters)}`, AbortSignal.any([signal, headers.signal]), false);
    } catch (e) {
      if (headers.signal.aborted && !signal.aborted) throw new EngineConnectError("ETIMEDOUT", this.socket);
      throw e;
    } finally {
      clearTimeout(timer);
    }
    const body = res.body;
    if (!body) throw new EngineApiError(res.status, "/events", "no body");
    return parseJsonLines<EngineEvent>(body);
  }
}
