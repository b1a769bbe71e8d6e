import { describe, expect, test } from "bun:test";
import { parseConfig } from "../../../src/config/load";
import { ConfigError } from "../../../src/config/problems";
import { ConfigSchema } from "../../../src/config/document";

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
      severity: "auto",
      multiline: [],
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
    expect(problems("agent:\n  logs:\n    severity: loud\n").length).toBeGreaterThan(0);
    expect(problems("agent:\n  gpu:\n    unknown: 1\n").length).toBeGreaterThan(0);
  });

  test("multiline rules: defaults filled per rule, a bad regular expression and bad bounds name their keys", () => {
    const c = parseConfig("agent:\n  logs:\n    multiline:\n      - include: [/var/log/java/*.log]\n        start_pattern: '^\\d{4}-'\n", {});
    expect(c.agent.logs.multiline).toEqual([
      { include: ["/var/log/java/*.log"], start_pattern: "^\\d{4}-", max_lines: 1000, max_bytes: "1MiB", flush_timeout: "1s" },
    ]);
    const yaml = [
      "agent:",
      "  logs:",
      "    multiline:",
      "      - include: [/a/*.log]",
      "        start_pattern: '^\\d'",
      "      - include: [relative/*.log]",
      "        start_pattern: '^(unclosed'",
      "        max_bytes: 10",
      "        flush_timeout: 0s",
      "",
    ].join("\n");
    const found = problems(yaml);
    expect(found).toHaveLength(4);
    expect(found[0]).toStartWith("agent.logs.multiline[1].start_pattern: not a valid regular expression: ");
    expect(found.slice(1)).toEqual([
      "agent.logs.multiline[1].max_bytes: must be between 1KiB and 64MiB, got 10 bytes",
      "agent.logs.multiline[1].flush_timeout: must be greater than 0",
      'agent.logs.multiline[1].include[0]: must be an absolute pattern or start with **, got "relative/*.log"',
    ]);
    expect(problems("agent:\n  logs:\n    multiline:\n      - include: [/a/*.log]\n").length).toBeGreaterThan(0);
    expect(problems("agent:\n  logs:\n    multiline:\n      - include: []\n        start_pattern: x\n").length).toBeGreaterThan(0);
    expect(problems("agent:\n  logs:\n    multiline:\n      - include: [/a]\n        start_pattern: x\n        max_line: 3\n").length).toBeGreaterThan(0);
  });
});

test("the document takes each registered collector's keys from its entry, in the registry's order: a part's under agent, a program set's under agent.ebpf", () => {
  const agent = ConfigSchema.properties.agent.properties;
  expect(Object.keys(agent)).toEqual(["ebpf", "profiling", "gpu", "logs", "discovery", "memory_limit"]);
  expect(Object.keys(agent.ebpf.properties)).toEqual(["enabled", "debug", "ringbuf_size", "network", "syscalls"]);
});
