/**
 * The `discovery` status view (GET /status/discovery) and its fields of GET /status, composed from the
 * registered sources (sources.ts): each source's part under its key, then discovered_services; in GET /status
 * each source's `<key>` flag (active and connected), then its counts.
 */
import { Type, type Static, type TBoolean, type TInteger, type TObject } from "@sinclair/typebox";
import { Count, type StatusSection } from "../status/model";
import type { DiscoveryConfig } from "./config";
import { SOURCES, type RegisteredSource } from "./sources";

export const DiscoveredServiceSchema = Type.Object({
  name: Type.String(),
  namespace: Type.String(),
  instances: Count("Ready instances."),
  ports: Type.Array(Type.Integer()),
});

type ViewParts = { [P in RegisteredSource as P["key"]]: P["view"] };
const viewParts = Object.fromEntries(SOURCES.map((s) => [s.key, s.view])) as ViewParts;

/** `discovery` view: GET /status/discovery. */
export const DiscoveryViewSchema = Type.Object({ ...viewParts, discovered_services: Type.Array(DiscoveredServiceSchema) });
export type DiscoveryView = Static<typeof DiscoveryViewSchema>;

const withSummary = SOURCES.flatMap((s) => ("summary" in s && s.summary ? [{ key: s.key, summary: s.summary }] : []));
const summaryProps: Record<string, TBoolean | TInteger> = {};
for (const s of withSummary) summaryProps[s.key] = Type.Boolean();
for (const s of withSummary) for (const name of Object.keys(s.summary.counts)) summaryProps[name] = Type.Integer({ minimum: 0 });

/** What GET /status shows of the view; discovery publishes it next to the view. */
export const DiscoverySummarySchema: TObject<Record<string, TBoolean | TInteger>> = Type.Object(summaryProps);
export type DiscoverySummary = Record<string, boolean | number>;

type SummaryDecl = { active: { ofView(v: never): boolean; ofSource(s: never): boolean }; counts: Record<string, { ofView(v: never): number; ofSource(s: never): number }> };

/** Each source's counts in GET /status, listed once: [source key, field name, pick]. */
const summaryCounts = withSummary.flatMap((s) => Object.entries(s.summary.counts).map(([name, c]) => [s.key, name, c as SummaryDecl["counts"][string]] as const));

/** The GET /status fields, each read by `read` from a source's part or from the source itself. */
export function summarise(read: (key: string, pick: SummaryDecl["active"] | SummaryDecl["counts"][string]) => boolean | number): DiscoverySummary {
  const out: DiscoverySummary = {};
  for (const s of withSummary) out[s.key] = read(s.key, s.summary.active as SummaryDecl["active"]);
  for (const [key, name, c] of summaryCounts) out[name] = read(key, c);
  return out;
}

export const DISCOVERY_STATUS: StatusSection<DiscoveryView, DiscoverySummary, { agent: { discovery: DiscoveryConfig } }> = {
  name: "discovery",
  disabled: (c) => ({
    ...(Object.fromEntries(SOURCES.map((s) => [s.key, (s.disabled as (d: DiscoveryConfig) => unknown)(c.agent.discovery)])) as Omit<DiscoveryView, "discovered_services">),
    discovered_services: [],
  }),
  summary: (v) => summarise((key, pick) => pick.ofView(v[key as RegisteredSource["key"]] as never)),
};
