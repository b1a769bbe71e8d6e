/**
 * http.route of RED metrics and server spans, with bounded cardinality. A path becomes a route by the first
 * configured template that matches it (per service, then for every service), else by a heuristic: numeric segments
 * become `{id}`, UUIDs `{uuid}`, hex strings `{hex}`, long tokens `{token}`, and a segment cut by the kernel's
 * capture `{truncated}`. Each service has at most `maxRoutes` routes; the paths of any further route count under
 * OVERFLOW_ROUTE. Raw paths never leave this module as attributes. Pure apart from its bounded caches.
 */

/** The route of exchanges whose service already has `maxRoutes` routes. */
export const OVERFLOW_ROUTE = "{overflow}";
/** Cached path -> template results at most per service (the route set itself is bounded by maxRoutes). */
const MAX_CACHED_PATHS = 8192;
/** A segment at least this long with a digit in it is a token. */
const TOKEN_MIN_CHARS = 16;
/** A segment at least this long is a token whatever it holds. */
const LONG_SEGMENT_CHARS = 40;
const HEX_MIN_CHARS = 8;

const NUMERIC = /^\d+$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const HEX = /^(0x)?[0-9a-f]+$/i;
const DIGIT = /\d/;

/** The placeholder of one path segment, or the segment itself. */
export function templateSegment(seg: string): string {
  if (seg === "") return seg;
  if (NUMERIC.test(seg)) return "{id}";
  if (UUID.test(seg)) return "{uuid}";
  if (seg.length >= HEX_MIN_CHARS && HEX.test(seg) && DIGIT.test(seg)) return "{hex}";
  if (seg.length >= LONG_SEGMENT_CHARS || (seg.length >= TOKEN_MIN_CHARS && DIGIT.test(seg))) return "{token}";
  return seg;
}

/** The heuristic route of `path`; `truncated`: the capture cut the path inside its last segment. */
export function heuristicRoute(path: string, truncated = false): string {
  const segs = path.split("/").map(templateSegment);
  if (truncated && segs.length > 1) segs[segs.length - 1] = "{truncated}";
  return segs.join("/");
}

/** Route templates ("/users/{id}/orders"): `{name}` stands for one non-empty path segment. */
export class RouteTable {
  readonly #routes: Array<{ template: string; segments: Array<string | null> }>;

  constructor(templates: readonly string[]) {
    this.#routes = templates.map((template) => ({ template, segments: template.split("/").map((seg) => (/^\{[^/{}]+\}$/.test(seg) ? null : seg)) }));
  }

  /** The first template matching `path`, or undefined. */
  match(path: string): string | undefined {
    if (this.#routes.length === 0) return undefined;
    const parts = path.split("/");
    for (const r of this.#routes) {
      if (r.segments.length !== parts.length) continue;
      let ok = true;
      for (let i = 0; i < parts.length && ok; i++) {
        const seg = r.segments[i];
        ok = seg === null ? parts[i] !== "" : seg === parts[i];
      }
      if (ok) return r.template;
    }
    return undefined;
  }
}

interface ServiceRoutes {
  routes: Set<string>;
  /** Path (cache key) -> route as route() answered it. */
  cache: Map<string, string>;
  /** Path (cache key) -> its template, whether or not it became a route (peek's, and route()'s first step). */
  templates: Map<string, string>;
}

export interface RouteTemplaterOptions {
  /** Templates for every service. */
  templates: readonly string[];
  /** Templates per service.name, tried before `templates`. */
  byService?: Readonly<Record<string, readonly string[]>>;
  /** Routes per service at most (the overflow route not counted). */
  maxRoutes: number;
}

export class RouteTemplater {
  readonly #global: RouteTable;
  readonly #byService = new Map<string, RouteTable>();
  readonly #services = new Map<string, ServiceRoutes>();
  /** Paths counted under OVERFLOW_ROUTE since creation (per lookup of a path not yet cached). */
  overflowed = 0;
  /** Changes whenever route or peek may answer otherwise than before for some path (a route or a cached path added). */
  version = 0;

  constructor(private readonly o: RouteTemplaterOptions) {
    this.#global = new RouteTable(o.templates);
    for (const [service, list] of Object.entries(o.byService ?? {})) this.#byService.set(service, new RouteTable(list));
  }

  #template(service: string, path: string, truncated: boolean): string {
    return this.#byService.get(service)?.match(path) ?? this.#global.match(path) ?? heuristicRoute(path, truncated);
  }

  #serviceRoutes(service: string): ServiceRoutes {
    let s = this.#services.get(service);
    if (!s) this.#services.set(service, (s = { routes: new Set(), cache: new Map(), templates: new Map() }));
    return s;
  }

  /** The template of `path` in `s` (cache key `key`), from the service's cache of templates where it is. */
  #templateOf(s: ServiceRoutes, service: string, key: string, path: string, truncated: boolean): string {
    let t = s.templates.get(key);
    if (t === undefined) {
      t = this.#template(service, path, truncated);
      if (s.templates.size >= MAX_CACHED_PATHS) s.templates.clear();
      s.templates.set(key, t);
    }
    return t;
  }

  /** The route of `path` for service `service` (its service.name); `truncated` as in heuristicRoute. */
  route(service: string, path: string, truncated = false): string {
    const s = this.#serviceRoutes(service);
    const cacheKey = truncated ? `${path}\u0000` : path;
    const cached = s.cache.get(cacheKey);
    if (cached !== undefined) return cached;
    const template = this.#templateOf(s, service, cacheKey, path, truncated);
    let route = template;
    if (!s.routes.has(template)) {
      if (s.routes.size < this.o.maxRoutes) s.routes.add(template);
      else {
        route = OVERFLOW_ROUTE;
        this.overflowed++;
      }
    }
    if (s.cache.size >= MAX_CACHED_PATHS) s.cache.clear();
    s.cache.set(cacheKey, route);
    this.version++;
    return route;
  }

  /**
   * The route `path` would get, without taking room for it: its template when already a route of `service` or
   * while the service has room, else OVERFLOW_ROUTE. For paths seen outside what is counted (a sampled span's, for
   * its exemplar): only counted exchanges may take one of the `maxRoutes` routes.
   */
  peek(service: string, path: string, truncated = false): string {
    const s = this.#serviceRoutes(service);
    const cacheKey = truncated ? `${path}\u0000` : path;
    const cached = s.cache.get(cacheKey);
    if (cached !== undefined) return cached;
    const template = this.#templateOf(s, service, cacheKey, path, truncated);
    return s.routes.has(template) || s.routes.size < this.o.maxRoutes ? template : OVERFLOW_ROUTE;
  }

  /** Routes known for `service` (for tests and status). */
  routesOf(service: string): string[] {
    return [...(this.#services.get(service)?.routes ?? [])];
  }
}
