/**
 * The combined `discovery` status view (DiscoveryViewSchema): each registered source's part, and the
 * discovered services of the first source that has the say (Kubernetes while active, else Docker). The list is
 * cached (frozen) by that source's stamp, so repeated requests cost only the small object assembly; /status
 * reads the summary, from the sources' counts.
 */
import type { DiscoveredService, ServiceList } from "./plugin";
import { SOURCES, type RegisteredSource } from "./sources";
import { summarise, type DiscoverySummary, type DiscoveryView } from "./status";

/** The built sources by key (each read synchronously at request time). */
export type BuiltSources = { [P in RegisteredSource as P["key"]]: ReturnType<P["create"]> };

/** `plugin`'s hooks called on its own source (the registry's union of plugins cannot type that pairing). */
const on = (built: BuiltSources, key: string) => built[key as RegisteredSource["key"]] as never;

export function createDiscoveryView(built: BuiltSources): () => DiscoveryView {
  let stamp: string | undefined;
  // Frozen, so the same list can go into every answer until a source changes.
  let cached: readonly DiscoveredService[] = Object.freeze([]);
  return () => {
    const out: Record<string, unknown> = {};
    let say: ServiceList | undefined;
    let sayStamp = "";
    SOURCES.forEach((p, i) => {
      const source = on(built, p.key);
      out[p.key] = p.viewOf(source);
      if (!say && "services" in p && p.services) {
        say = p.services(source);
        if (say) sayStamp = `${i}:${say.stamp}`;
      }
    });
    if (sayStamp !== stamp) {
      const list = (say as ServiceList | undefined)?.list() ?? [];
      for (const s of list) Object.freeze(Object.freeze(s).ports);
      cached = Object.freeze(list);
      stamp = sayStamp;
    }
    out.discovered_services = cached as DiscoveredService[];
    return out as DiscoveryView;
  };
}

/** What /status shows of the discovery view (same values), from the sources' counts: no list built or copied. */
export function createDiscoverySummary(built: BuiltSources): () => DiscoverySummary {
  return () => summarise((key, pick) => pick.ofSource(on(built, key)));
}
