import { describe, expect, test } from "bun:test";
import { parseConfig } from "../../../src/config/load";
import { ConfigError } from "../../../src/config/problems";

function problems(yaml: string): string[] {
  try {
    parseConfig(yaml, {});
    return [];
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    return e.problems.map((p) => `${p.path}: ${p.message}`);
  }
}

describe("agent.logs / agent.profiling / agent.gpu configuration", () => {
  test("defaults", () => {
    const c = parseConfig("", {});
    expect(c.agent.logs).toEqual({
      enabled: false,
      include: ["/var/log/containers/*.log", "/var/log/pods/**/*.log"],
      exclude: ["**/*.gz"],
      format: "auto",
      start_at: "beginning",
      checkpoint_file: "/var/lib/svc-agent/logs-checkpoint.json",
      checkpoint_interval: "1s",
      poll_interval: "250ms",
      rescan_interval: "5s",
      max_line_size: "256KiB",
    });
    expect(c.agent.profiling).toEqual({ enabled: false, sample_rate: 99, interval: "10s", pid: 0, pprof_dir: "", pprof_keep: 10 });
    expect(c.agent.gpu).toEqual({ enabled: false, interval: "10s", library: "libnvidia-ml.so.1" });
  });

  test("cross-field rules name the key", () => {
    expect(problems("agent:\n  profiling:\n    interval: 500ms\n")).toEqual(["agent.profiling.interval: must be at least 1s, got 500ms"]);
    expect(problems("agent:\n  logs:\n    include: [relative/*.log]\n")).toEqual(['agent.logs.include.0: must be an absolute pattern, got "relative/*.log"']);
    expect(problems("agent:\n  logs:\n    max_line_size: 100\n")).toEqual(["agent.logs.max_line_size: must be between 1KiB and 16MiB, got 100 bytes"]);
    expect(problems("agent:\n  logs:\n    poll_interval: 0s\n")).toEqual(["agent.logs.poll_interval: must be greater than 0"]);
    expect(problems("agent:\n  logs:\n    format: json\n").length).toBeGreaterThan(0);
    expect(problems("agent:\n  gpu:\n    unknown: 1\n").length).toBeGreaterThan(0);
  });
});
