import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { embeddedDefaultText, loadConfig, parseConfig, resolveConfigPath } from "../../../src/config";
import { problemsOf } from "../../helpers/config-problems";

describe("defaults", () => {
  test("an empty document gives every default", () => {
    const c = parseConfig("", {});
    expect(c.mode).toBe("agent");
    expect(c.self_telemetry.listen).toBe(":19090");
    expect(c.self_telemetry.path).toBe("/metrics");
    expect(c.self_telemetry.prometheus_namespace).toBe("svc");
    expect(c.self_telemetry.auth.enabled).toBe(false);
    expect(c.self_telemetry.auth.exempt_paths).toEqual(["/healthz", "/ready"]);
    expect(c.svc.log_level).toBe("info");
    expect(c.svc.log_format).toBe("json");
    expect(c.agent.ebpf.ringbuf_size).toBe("auto");
    expect(c.shutdown_timeout).toBe("10s");
    expect(c.otlp.endpoint).toBe("127.0.0.1:4317");
  });

  test("the embedded default configuration is valid", () => {
    expect(() => parseConfig(embeddedDefaultText(), {})).not.toThrow();
  });

  test("the shipped example configuration is valid", () => {
    const example = readFileSync(join(import.meta.dir, "../../../deploy/config.example.yaml"), "utf8");
    expect(() => parseConfig(example, { API_TOKEN: "t" })).not.toThrow();
  });
});

describe("every problem is reported with its key path, all at once", () => {
  test("unknown keys, wrong types, bad durations and sizes, bad enums", () => {
    const problems = problemsOf(`
self_telemetry:
  bogus: 1
  listen: 5
otlp:
  timeout: 5x
queues:
  traces:
    mem_limit: 12QB
svc:
  log_level: loud
`);
    const byPath = Object.fromEntries(problems.map((p) => [p.path, p.message]));
    expect(byPath["self_telemetry.bogus"]).toBe("unknown key");
    expect(byPath["self_telemetry.listen"]).toContain("expected string");
    expect(byPath["otlp.timeout"]).toContain("expected a duration");
    expect(byPath["queues.traces.mem_limit"]).toContain("expected a size");
    expect(byPath["svc.log_level"]).toContain('"debug", "info", "warn", "error"');
    expect(problems.length).toBe(5);
  });

  test("an unknown top-level section", () => {
    expect(problemsOf("agnet: {}\n")).toEqual([{ path: "agnet", message: "unknown key", line: 1, column: 1 }]);
  });

  test("out-of-range numbers", () => {
    const p = problemsOf("self_telemetry:\n  tracing:\n    sample_rate: 1.5\n");
    expect(p[0]!.path).toBe("self_telemetry.tracing.sample_rate");
    expect(p[0]!.message).toContain("1.5");
  });

  test("cross-field rules", () => {
    expect(problemsOf("self_telemetry:\n  auth:\n    enabled: true\n")).toEqual([
      { path: "self_telemetry.auth.bearer_token", message: "must be set when self_telemetry.auth.enabled is true", line: 2, column: 3 },
    ]);
    expect(problemsOf("backoff:\n  initial: 10s\n  max: 1s\n")[0]!.path).toBe("backoff.max");
    expect(problemsOf("queues:\n  logs:\n    capacity: 10\n    batch_size: 20\n")[0]!.path).toBe("queues.logs.batch_size");
    expect(problemsOf("self_telemetry:\n  listen: nowhere\n")[0]!.path).toBe("self_telemetry.listen");
    expect(problemsOf("agent:\n  ebpf:\n    ringbuf_size: 100\n")[0]!.path).toBe("agent.ebpf.ringbuf_size");
  });

  test("YAML syntax errors", () => {
    const p = problemsOf("self_telemetry: [\n");
    expect(p[0]!.message).toStartWith("YAML:");
  });

  test("a document that is not a mapping", () => {
    expect(problemsOf("- a\n- b\n")[0]!.message).toContain("mapping");
  });

  test("duplicate keys are refused", () => {
    expect(problemsOf("mode: agent\nmode: agent\n")[0]!.message).toStartWith("YAML:");
  });
});

describe("every problem has a line and column in the file", () => {
  test("schema problems point at the value, unknown keys at the key", () => {
    const p = problemsOf(`mode: agent
self_telemetry:
  listen: 5
  bogus: 1
queues:
  traces:
    batch_timeout: soon
agent:
  logs:
    include: ["/ok", 7]
`);
    const at = Object.fromEntries(p.map((x) => [x.path, [x.line, x.column]]));
    expect(at["self_telemetry.listen"]).toEqual([3, 11]);
    expect(at["self_telemetry.bogus"]).toEqual([4, 3]);
    expect(at["queues.traces.batch_timeout"]).toEqual([7, 20]);
    expect(at["agent.logs.include[1]"]).toEqual([10, 22]);
    expect(p.every((x) => x.line !== undefined && x.column !== undefined)).toBe(true);
  });

  test("cross-field problems, unset variables and the telegen alias are located too", () => {
    expect(problemsOf("queues:\n  logs:\n    capacity: 10\n    batch_size: 20\n")[0]).toMatchObject({ path: "queues.logs.batch_size", line: 4, column: 17 });
    expect(problemsOf("agent:\n  logs:\n    include:\n      - /a\n      - rel/*.log\n")[0]).toMatchObject({ line: 5, column: 9 });
    expect(problemsOf("telegen:\n  log_level: loud\n")[0]).toMatchObject({ path: "svc.log_level", line: 2, column: 14 });
    expect(problemsOf("otlp:\n  headers:\n    a.b: ${NOPE}\n")[0]).toMatchObject({ path: "otlp.headers.a.b", line: 3, column: 10 });
  });

  test("a problem with a value from an SVC_* variable names the variable instead", () => {
    const [p] = problemsOf("svc:\n  log_level: info\n", { SVC_LOG_LEVEL: "loud" });
    expect(p).toMatchObject({ path: "svc.log_level", variable: "SVC_LOG_LEVEL" });
    expect(p!.line).toBeUndefined();
  });

  test("YAML syntax errors: the message ends cleanly, the place is the error's", () => {
    for (const [text, line, column] of [["mode: agent\nmode: agent\n", 2, 1], ["a:\n  b: c\n d: e\n", 3, 1], ["x: 'abc\n", 2, 1]] as const) {
      const [p] = problemsOf(text);
      expect(p!.message).toStartWith("YAML: ");
      expect(p!.message).not.toMatch(/[:\s]$/);
      expect(p!.message).not.toContain("\n");
      expect([p!.line, p!.column]).toEqual([line, column]);
    }
  });

  test("the error text says where: `path: message (line L, column C)`", () => {
    try {
      parseConfig("backoff:\n  initial: fast\n", {}, "c.yaml");
      throw new Error("accepted");
    } catch (e) {
      expect((e as Error).message).toBe('invalid configuration in c.yaml:\n  backoff.initial: expected a duration like 500ms, 1s or 2m, got "fast" (line 2, column 12)');
    }
  });
});

describe("${VAR} substitution", () => {
  test("whole values take the variable's YAML type; embedded ones are text", () => {
    const c = parseConfig(
      "self_telemetry:\n  listen: 127.0.0.1:${PORT}\n  auth:\n    enabled: ${AUTH}\n    bearer_token: ${API_TOKEN}\n",
      { PORT: "9999", AUTH: "true", API_TOKEN: "s3cret" },
    );
    expect(c.self_telemetry.listen).toBe("127.0.0.1:9999");
    expect(c.self_telemetry.auth.enabled).toBe(true);
    expect(c.self_telemetry.auth.bearer_token).toBe("s3cret");
  });

  test("defaults apply when the variable is unset", () => {
    const c = parseConfig("otlp:\n  endpoint: ${EP:-localhost:4317}\n", {});
    expect(c.otlp.endpoint).toBe("localhost:4317");
  });

  test("an unset variable without default is an error naming it and the key", () => {
    expect(problemsOf("otlp:\n  endpoint: ${NOPE}\n", {})).toEqual([
      { path: "otlp.endpoint", message: "environment variable NOPE is not set (write ${NOPE:-default} to give a default)", line: 2, column: 13 },
    ]);
  });

  test("$$ escapes a dollar", () => {
    const c = parseConfig("otlp:\n  headers:\n    x-key: a$${B}\n", {});
    expect(c.otlp.headers["x-key"]).toBe("a${B}");
  });

  test("a variable cannot inject YAML structure", () => {
    const c = parseConfig("service_name: ${V}\n", { V: "a\nmode: other" });
    expect(c.service_name).toBe("a\nmode: other");
    expect(c.mode).toBe("agent");
  });
});

describe("environment overrides", () => {
  test("SVC_LOG_LEVEL, SVC_LOG_FORMAT, SVC_AGENT_EBPF_DEBUG and SVC_DEBUG win over the file", () => {
    const c = parseConfig("svc:\n  log_level: info\n", {
      SVC_LOG_LEVEL: "debug",
      SVC_LOG_FORMAT: "text",
      SVC_AGENT_EBPF_DEBUG: "true",
      SVC_DEBUG: "1",
    });
    expect(c.svc.log_level).toBe("debug");
    expect(c.svc.log_format).toBe("text");
    expect(c.agent.ebpf.debug).toBe(true);
    expect(c.self_telemetry.debug.enabled).toBe(true);
  });

  test("a malformed override names the variable", () => {
    const p = problemsOf("", { SVC_AGENT_EBPF_DEBUG: "maybe" });
    expect(p[0]!.path).toBe("agent.ebpf.debug");
    expect(p[0]!.message).toContain("SVC_AGENT_EBPF_DEBUG");
    expect(problemsOf("", { SVC_LOG_LEVEL: "loud" })[0]!.path).toBe("svc.log_level");
  });
});

describe("the telegen: alias", () => {
  test("configurations written for the original agent load unchanged", () => {
    const c = parseConfig("telegen:\n  log_level: warn\n  log_format: text\n", {});
    expect(c.svc.log_level).toBe("warn");
    expect(c.svc.log_format).toBe("text");
  });
  test("giving both sections is an error", () => {
    expect(problemsOf("telegen:\n  log_level: warn\nsvc:\n  log_level: info\n")[0]!.path).toBe("telegen");
  });
});

describe("which file is loaded", () => {
  const dir = mkdtempSync(join(tmpdir(), "svc-cfg-"));
  const system = join(dir, "system.yaml");
  test("--config, then SVC_CONFIG, then the system file, else embedded defaults", () => {
    expect(resolveConfigPath("a.yaml", { SVC_CONFIG: "b.yaml" }, system)).toBe("a.yaml");
    expect(resolveConfigPath(undefined, { SVC_CONFIG: "b.yaml" }, system)).toBe("b.yaml");
    expect(resolveConfigPath(undefined, {}, system)).toBeUndefined();
    writeFileSync(system, "mode: agent\n");
    expect(resolveConfigPath(undefined, {}, system)).toBe(system);
  });
  test("a missing file is a configuration error naming it", () => {
    expect(() => loadConfig(join(dir, "missing.yaml"), {})).toThrow(/no such file/);
  });
});
