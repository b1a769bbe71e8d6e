/** self_telemetry's own rules: the metrics path may not shadow a route the interface serves. */
import { describe, expect, test } from "bun:test";
import { ConfigError, parseConfig } from "../../../src/config";

function problemsOf(text: string) {
  try {
    parseConfig(text, {});
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
  return [];
}
const withPath = (p: string) => `self_telemetry:\n  path: ${JSON.stringify(p)}\n`;

describe("self_telemetry.path", () => {
  test.each([
    "/healthz", "/ready", "/status", "/status/ebpf", "/status/export", "/status/discovery", "/config", "/debug", "/debug/vars",
    "/debug/pprof", "/debug/pprof/heap", "/admin", "/admin/reload", "/admin/flush", "/openapi.json", "/api", "/api/v1",
    "/api/v1/metrics", "/api/v1/healthz", "/api/v2/metrics", "/healthz/", "/status/", "/ready/metrics",
  ])("%s would shadow a route: refused, naming the key", (path) => {
    const problems = problemsOf(withPath(path));
    expect(problems).toHaveLength(1);
    expect(problems[0]!.path).toBe("self_telemetry.path");
    expect(problems[0]!.message).toContain("would shadow the interface's own");
  });

  test.each(["/:profile", "/*", "/metrics/*", "/a b", "/metrics?x=1", "/metrics#x", "//metrics", "/./healthz", "/../metrics", "metrics", "/", "/metrics%20"])(
    "%s is not a plain path: refused, naming the key",
    (path) => {
      const problems = problemsOf(withPath(path));
      expect(problems.map((p) => p.path)).toEqual(["self_telemetry.path"]);
    },
  );

  test.each(["/metrics", "/metrics/", "/prometheus/metrics", "/statusz", "/healthz2", "/metrics.txt", "/my-agent_v1~/metrics"])("%s is accepted", (path) => {
    expect(problemsOf(withPath(path))).toEqual([]);
  });
});
