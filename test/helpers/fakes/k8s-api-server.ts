/**
 * A Kubernetes API server of our own for discovery tests: Bun.serve on 127.0.0.1 port 0 (plain HTTP or TLS),
 * speaking the real list/watch protocol for pods and services (core/v1): resourceVersion on every object
 * and list, watch from a resourceVersion with history replay, BOOKMARK events when asked for
 * (allowWatchBookmarks), chunked lists (limit/continue), `410 Gone` (an ERROR event with an Expired Status) for compacted versions,
 * field selectors (spec.nodeName, metadata.name, metadata.namespace), label selectors (a=b), bearer
 * token authentication with rotation, and the discovery documents kubectl needs (/api, /apis, /api/v1,
 * /version). Every request is recorded (method, path, query) so the RBAC rules can be checked against it.
 * Its fidelity is checked in the tests with the real kubectl.
 */
import type { Server } from "bun";

export type Kind = "pods" | "services";
export type K8sObject = { metadata: { name: string; namespace?: string; uid?: string; resourceVersion?: string; labels?: Record<string, string>; [k: string]: unknown }; [k: string]: unknown };

export interface RecordedRequest {
  method: string;
  path: string;
  query: Record<string, string>;
  /** The bearer token presented ("" when none). */
  token: string;
  /** HTTP status of the answer (200 for a watch that was accepted). */
  status: number;
}

interface HistoryEvent {
  rv: number;
  kind: Kind;
  type: "ADDED" | "MODIFIED" | "DELETED";
  object: K8sObject;
}

interface OpenWatch {
  kind: Kind;
  token: string;
  filter: (o: K8sObject) => boolean;
  send: (event: unknown) => void;
  close: () => void;
}

export interface FakeApiServerOptions {
  /** Accepted bearer tokens at start; empty: no authentication. */
  tokens?: string[];
  /** TLS certificate and key (PEM) to serve HTTPS. */
  tls?: { cert: string; key: string };
  /** Answer a too-old watch with HTTP 410 instead of a 200 stream carrying an ERROR event. */
  goneAsHttpStatus?: boolean;
}

const KIND_META: Record<Kind, { kind: string; listKind: string; singular: string; short: string[] }> = {
  pods: { kind: "Pod", listKind: "PodList", singular: "pod", short: ["po"] },
  services: { kind: "Service", listKind: "ServiceList", singular: "service", short: ["svc"] },
};

const ROUTE = /^\/api\/v1\/(?:namespaces\/([^/]+)\/)?(pods|services)(?:\/([^/]+))?$/;

function status(code: number, reason: string, message: string) {
  return { kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message, reason, code };
}

function json(body: unknown, code = 200): Response {
  return new Response(JSON.stringify(body), { status: code, headers: { "content-type": "application/json" } });
}

function fieldValue(o: K8sObject, path: string): string | undefined {
  let cur: unknown = o;
  for (const part of path.split(".")) {
    if (cur === null || typeof cur !== "object") return undefined;
    cur = (cur as Record<string, unknown>)[part];
  }
  return cur === undefined ? undefined : String(cur);
}

/** Parses `a=b,c!=d` (field or label selectors) into a predicate. */
function selector(text: string | null, get: (o: K8sObject, key: string) => string | undefined): (o: K8sObject) => boolean {
  if (!text) return () => true;
  const terms = text.split(",").filter(Boolean).map((t) => {
    const neg = t.includes("!=");
    const [k, v] = neg ? t.split("!=") : t.split(/==?/);
    return { k: k!.trim(), v: (v ?? "").trim(), neg };
  });
  return (o) => terms.every(({ k, v, neg }) => (get(o, k) === v) !== neg);
}

export class FakeKubeApiServer {
  readonly server: Server<undefined>;
  readonly requests: RecordedRequest[] = [];
  #rv = 1;
  #compactedRv = 0;
  #objects: Record<Kind, Map<string, K8sObject>> = { pods: new Map(), services: new Map() };
  #history: HistoryEvent[] = [];
  #watches = new Set<OpenWatch>();
  #tokens: Set<string>;
  #uid = 0;
  readonly #tls: boolean;
  /** When set, every list and watch answers this HTTP status (simulates an API outage). */
  failWith: number | undefined;
  goneAsHttpStatus: boolean;

  constructor(options: FakeApiServerOptions = {}) {
    this.#tokens = new Set(options.tokens ?? []);
    this.#tls = options.tls !== undefined;
    this.goneAsHttpStatus = options.goneAsHttpStatus ?? false;
    this.server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      idleTimeout: 0,
      ...(options.tls ? { tls: options.tls } : {}),
      fetch: (req) => this.#handle(req),
    });
  }

  get url(): string {
    return `${this.#tls ? "https" : "http"}://127.0.0.1:${this.server.port}`;
  }

  get port(): number {
    return this.server.port!;
  }

  /** The current resourceVersion of the store. */
  get resourceVersion(): number {
    return this.#rv;
  }

  /**
   * The RBAC rules the recorded requests needed: core-group resources with the verbs used (`list`, `watch`,
   * `get`), discovery paths (/api, /apis, /version) excluded. Deployment tests compare their ClusterRole to it.
   */
  rbacRules(): Array<{ apiGroups: string[]; resources: string[]; verbs: string[] }> {
    const verbs = new Map<string, Set<string>>();
    for (const r of this.requests) {
      const m = ROUTE.exec(r.path);
      if (!m) continue;
      const verb = m[3] ? "get" : r.query.watch === "true" || r.query.watch === "1" ? "watch" : "list";
      let set = verbs.get(m[2]!);
      if (!set) verbs.set(m[2]!, (set = new Set()));
      set.add(verb);
    }
    return [...verbs.entries()].sort().map(([resource, v]) => ({ apiGroups: [""], resources: [resource], verbs: [...v].sort() }));
  }

  /** Open watch connections (per kind). */
  openWatches(kind?: Kind): number {
    return [...this.#watches].filter((w) => !kind || w.kind === kind).length;
  }

  /** Creates or replaces an object; returns it with its metadata filled (uid, resourceVersion, creationTimestamp). */
  put(kind: Kind, object: K8sObject): K8sObject {
    const ns = object.metadata.namespace ?? "default";
    const key = `${ns}/${object.metadata.name}`;
    const prev = this.#objects[kind].get(key);
    const rv = ++this.#rv;
    const stored: K8sObject = structuredClone(object);
    stored.apiVersion = "v1";
    stored.kind = KIND_META[kind].kind;
    stored.metadata = {
      ...stored.metadata,
      namespace: ns,
      uid: prev?.metadata.uid ?? object.metadata.uid ?? `00000000-0000-4000-8000-${String(++this.#uid).padStart(12, "0")}`,
      resourceVersion: String(rv),
      creationTimestamp: (prev?.metadata.creationTimestamp as string | undefined) ?? new Date().toISOString().replace(/\.\d+Z$/, "Z"),
    };
    this.#objects[kind].set(key, stored);
    this.#emit({ rv, kind, type: prev ? "MODIFIED" : "ADDED", object: stored });
    return stored;
  }

  /** Deletes an object (a DELETED event carries its last state with a new resourceVersion). */
  delete(kind: Kind, namespace: string, name: string): boolean {
    const key = `${namespace}/${name}`;
    const prev = this.#objects[kind].get(key);
    if (!prev) return false;
    this.#objects[kind].delete(key);
    const rv = ++this.#rv;
    const object = { ...prev, metadata: { ...prev.metadata, resourceVersion: String(rv) } };
    this.#emit({ rv, kind, type: "DELETED", object });
    return true;
  }

  /** Forgets history up to now: watches from an older resourceVersion get 410 Gone. */
  compact(): void {
    this.#compactedRv = this.#rv;
    this.#history = [];
  }

  /** Sends a BOOKMARK (current resourceVersion) on every watch that asked for bookmarks. */
  bookmark(): void {
    for (const w of this.#watches) w.send({ type: "BOOKMARK", object: { kind: KIND_META[w.kind].kind, apiVersion: "v1", metadata: { resourceVersion: String(this.#rv) } } });
  }

  /** Accepts only `token` from now on and closes the watches opened with any other token (as an expiry would). */
  rotateToken(token: string): void {
    this.#tokens = new Set([token]);
    for (const w of [...this.#watches]) if (w.token !== token) w.close();
  }

  /** Ends every open watch (the client must reconnect from its last resourceVersion). */
  closeWatches(): void {
    for (const w of [...this.#watches]) w.close();
  }

  stop(): void {
    this.closeWatches();
    this.server.stop(true);
  }

  #emit(e: HistoryEvent): void {
    this.#history.push(e);
    for (const w of this.#watches) if (w.kind === e.kind && w.filter(e.object)) w.send({ type: e.type, object: e.object });
  }

  #handle(req: Request): Response | Promise<Response> {
    const url = new URL(req.url);
    const query = Object.fromEntries(url.searchParams);
    const token = (req.headers.get("authorization") ?? "").replace(/^Bearer\s+/i, "");
    const rec: RecordedRequest = { method: req.method, path: url.pathname, query, token, status: 200 };
    this.requests.push(rec);
    const answer = (r: Response) => {
      rec.status = r.status;
      return r;
    };
    if (this.#tokens.size > 0 && !this.#tokens.has(token)) return answer(json(status(401, "Unauthorized", "Unauthorized"), 401));
    if (req.method !== "GET") return answer(json(status(405, "MethodNotAllowed", "the fake API server only serves GET"), 405));
    switch (url.pathname) {
      case "/version":
        return answer(json({ major: "1", minor: "32", gitVersion: "v1.32.0-svc-fake", platform: "linux/amd64" }));
      case "/api":
        return answer(json({ kind: "APIVersions", versions: ["v1"], serverAddressByClientCIDRs: [{ clientCIDR: "0.0.0.0/0", serverAddress: `127.0.0.1:${this.port}` }] }));
      case "/apis":
        return answer(json({ kind: "APIGroupList", apiVersion: "v1", groups: [] }));
      case "/api/v1":
        return answer(
          json({
            kind: "APIResourceList",
            groupVersion: "v1",
            resources: (Object.keys(KIND_META) as Kind[]).map((k) => ({
              name: k,
              singularName: KIND_META[k].singular,
              namespaced: true,
              kind: KIND_META[k].kind,
              verbs: ["get", "list", "watch"],
              shortNames: KIND_META[k].short,
            })),
          }),
        );
    }
    const m = ROUTE.exec(url.pathname);
    if (!m) return answer(json(status(404, "NotFound", `the server could not find the requested resource (${url.pathname})`), 404));
    if (this.failWith) return answer(json(status(this.failWith, "InternalError", "injected failure"), this.failWith));
    const [, ns, kind, name] = m as unknown as [string, string | undefined, Kind, string | undefined];
    if (name) {
      const o = this.#objects[kind].get(`${ns}/${name}`);
      return answer(o ? json(o) : json(status(404, "NotFound", `${kind} "${name}" not found`), 404));
    }
    const fields = selector(url.searchParams.get("fieldSelector"), (o, k) => fieldValue(o, k));
    const labels = selector(url.searchParams.get("labelSelector"), (o, k) => o.metadata.labels?.[k]);
    const filter = (o: K8sObject) => (!ns || o.metadata.namespace === ns) && fields(o) && labels(o);
    const watch = query.watch === "true" || query.watch === "1";
    if (!watch) {
      const all = [...this.#objects[kind].values()].filter(filter).sort((a, b) => `${a.metadata.namespace}/${a.metadata.name}`.localeCompare(`${b.metadata.namespace}/${b.metadata.name}`));
      // Chunked lists (limit/continue): the token carries the list's resourceVersion and the next offset.
      let offset = 0;
      let rv = String(this.#rv);
      if (query.continue) {
        try {
          const t = JSON.parse(Buffer.from(query.continue, "base64").toString()) as { rv: string; offset: number };
          offset = t.offset;
          rv = t.rv;
        } catch {
          return answer(json(status(400, "BadRequest", "invalid continue token"), 400));
        }
      }
      const limit = Number(query.limit ?? 0);
      const items = limit > 0 ? all.slice(offset, offset + limit) : all.slice(offset);
      const more = limit > 0 && offset + limit < all.length;
      const metadata: Record<string, unknown> = { resourceVersion: rv };
      if (more) {
        metadata.continue = Buffer.from(JSON.stringify({ rv, offset: offset + limit })).toString("base64");
        metadata.remainingItemCount = all.length - offset - limit;
      }
      return answer(json({ kind: KIND_META[kind].listKind, apiVersion: "v1", metadata, items }));
    }
    const r = this.#watch(kind, filter, query, token, rec);
    return answer(r);
  }

  #watch(kind: Kind, filter: (o: K8sObject) => boolean, query: Record<string, string>, token: string, rec: RecordedRequest): Response {
    const from = query.resourceVersion;
    const fromRv = from === undefined || from === "" || from === "0" ? undefined : Number(from);
    const expired = fromRv !== undefined && fromRv < this.#compactedRv;
    const gone = status(410, "Expired", `too old resource version: ${fromRv} (${this.#compactedRv})`);
    if (expired && this.goneAsHttpStatus) return json(gone, 410);
    const bookmarks = query.allowWatchBookmarks === "true";
    const encoder = new TextEncoder();
    const watches = this.#watches;
    let entry: OpenWatch | undefined;
    const timeoutS = Number(query.timeoutSeconds ?? 0);
    const stream = new ReadableStream<Uint8Array>({
      start: (controller) => {
        let closed = false;
        const close = () => {
          if (closed) return;
          closed = true;
          watches.delete(entry!);
          clearTimeout(timer);
          try {
            controller.close();
          } catch {
            // the client went away first
          }
        };
        const send = (ev: unknown) => {
          if (closed) return;
          const type = (ev as { type: string }).type;
          if (type === "BOOKMARK" && !bookmarks) return;
          try {
            controller.enqueue(encoder.encode(JSON.stringify(ev) + "\n"));
          } catch {
            close();
          }
        };
        const timer = timeoutS > 0 ? setTimeout(close, timeoutS * 1000) : undefined;
        entry = { kind, token, filter, send, close };
        // The API server flushes a watch's headers when it starts; Bun.serve holds a stream's headers until its
        // first byte, and a watch with nothing to replay would stay unanswered. A blank line is whitespace
        // between JSON documents (skipped by the agent and by kubectl's decoder).
        controller.enqueue(encoder.encode("\n"));
        if (expired) {
          send({ type: "ERROR", object: gone });
          close();
          return;
        }
        if (fromRv === undefined) {
          for (const o of this.#objects[kind].values()) if (filter(o)) send({ type: "ADDED", object: o });
        } else {
          for (const e of this.#history) if (e.rv > fromRv && e.kind === kind && filter(e.object)) send({ type: e.type, object: e.object });
        }
        watches.add(entry);
      },
      cancel: () => {
        if (entry) watches.delete(entry);
      },
    });
    rec.status = 200;
    return new Response(stream, { status: 200, headers: { "content-type": "application/json", "transfer-encoding": "chunked" } });
  }

  /** A uid-stable pod object for tests. */
  static pod(p: {
    name: string;
    namespace?: string;
    node: string;
    labels?: Record<string, string>;
    owner?: { kind: string; name: string };
    containers: Array<{ name: string; id?: string; image?: string }>;
    ready?: boolean;
  }): K8sObject {
    return {
      metadata: {
        name: p.name,
        namespace: p.namespace ?? "default",
        labels: p.labels ?? {},
        ...(p.owner ? { ownerReferences: [{ apiVersion: "apps/v1", kind: p.owner.kind, name: p.owner.name, uid: `owner-${p.owner.name}`, controller: true }] } : {}),
      },
      spec: { nodeName: p.node, containers: p.containers.map((c) => ({ name: c.name, image: c.image ?? "busybox:1.36" })) },
      status: {
        phase: "Running",
        conditions: [{ type: "Ready", status: p.ready === false ? "False" : "True" }],
        containerStatuses: p.containers.map((c) => ({
          name: c.name,
          image: c.image ?? "busybox:1.36",
          ready: p.ready !== false,
          restartCount: 0,
          ...(c.id ? { containerID: c.id } : {}),
          state: { running: { startedAt: new Date().toISOString().replace(/\.\d+Z$/, "Z") } },
        })),
      },
    };
  }

  static service(s: { name: string; namespace?: string; selector?: Record<string, string>; ports: number[] }): K8sObject {
    return {
      metadata: { name: s.name, namespace: s.namespace ?? "default" },
      spec: { selector: s.selector, ports: s.ports.map((p) => ({ port: p, protocol: "TCP", targetPort: p })), type: "ClusterIP", clusterIP: "10.0.0.10" },
    };
  }
}
