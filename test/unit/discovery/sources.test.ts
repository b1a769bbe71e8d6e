/** The discovery registry: every registered source's keys, view part, /status fields and component, composed in the order of SOURCES. */
import { expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { loadConfig } from "../../../src/config/load";
import { DiscoverySchema } from "../../../src/discovery/config";
import { SOURCES } from "../../../src/discovery/sources";
import { DISCOVERY_STATUS, DiscoverySummarySchema, DiscoveryViewSchema } from "../../../src/discovery/status";
import { discoveryHarness } from "../../helpers/discovery-harness";

test("configuration keys, view parts and /status fields come from the sources, in their order", () => {
  expect(SOURCES.map((s) => s.key)).toEqual(["kubernetes", "docker", "cloud"]);
  expect(Object.keys(DiscoverySchema.properties)).toEqual(["detect_kubernetes", "kubernetes", "docker", "cloud"]);
  expect(Object.keys(DiscoveryViewSchema.properties)).toEqual(["kubernetes", "docker", "cloud", "discovered_services"]);
  expect(Object.keys(DiscoverySummarySchema.properties)).toEqual(["kubernetes", "docker", "pods_discovered", "containers_discovered"]);
});

test("the view shown while discovery publishes none is valid and summarises to zeros", () => {
  const config = loadConfig(undefined, {}).config;
  const disabled = DISCOVERY_STATUS.disabled(config);
  expect(Value.Check(DiscoveryViewSchema, disabled)).toBe(true);
  expect(DISCOVERY_STATUS.summary(disabled)).toEqual({ kubernetes: false, docker: false, pods_discovered: 0, containers_discovered: 0 });
});

test("every registered source is built as a component; cloud starts first", async () => {
  const h = discoveryHarness("agent:\n  discovery:\n    detect_kubernetes: false\n    docker:\n      enabled: false\n    cloud:\n      enabled: false\n");
  expect(h.parts.components.map((c) => c.id)).toEqual(["discovery/cloud", "discovery/kubernetes", "discovery/docker"]);
  expect(Object.keys(h.parts.sources)).toEqual(["kubernetes", "docker", "cloud"]);
  await h.start();
  const view = h.view();
  expect(Value.Check(DiscoveryViewSchema, view)).toBe(true);
  expect(view.discovered_services).toEqual([]);
  await h.stop();
});
