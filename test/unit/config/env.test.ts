/**
 * otlp.protocol, endpoint forms, per-signal resolution, and the OpenTelemetry environment variables: what they
 * set, their precedence over the file, their errors (naming the variable, never a header's value) and the
 * redaction of the secrets they bring.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseConfig } from "../../../src/config";
import { OTEL_VARIABLES, otelVariablesMarkdown } from "../../../src/config/env";
import { redactConfig, secretsOf } from "../../../src/config/secrets";
import { signalTarget } from "../../../src/export/config";
import { problemsOf } from "../../helpers/config-problems";

describe("otlp.protocol and the endpoint", () => {
  test("grpc by default at 127.0.0.1:4317; http/protobuf defaults to http://127.0.0.1:4318 with the signal paths appended", () => {
    const g = parseConfig("", {});
    expect(g.otlp.protocol).toBe("grpc");
    expect(signalTarget(g.otlp, "traces")).toMatchObject({ protocol: "grpc", address: "127.0.0.1:4317", insecure: true });
    const h = parseConfig("otlp:\n  protocol: http/protobuf\n", {});
    expect(h.otlp.endpoint).toBe("http://127.0.0.1:4318");
    expect(signalTarget(h.otlp, "traces").url).toBe("http://127.0.0.1:4318/v1/traces");
    expect(signalTarget(h.otlp, "metrics").url).toBe("http://127.0.0.1:4318/v1/metrics");
    expect(signalTarget(h.otlp, "logs").url).toBe("http://127.0.0.1:4318/v1/logs");
    expect(signalTarget(h.otlp, "profiles").url).toBe("http://127.0.0.1:4318/v1development/profiles");
  });

  test("a generic endpoint's path is kept and the signal's path appended; a per-signal endpoint is used as it is", () => {
    const c = parseConfig(
      "otlp:\n  protocol: http/protobuf\n  endpoint: https://collector.example:4443/otlp/\n  signals:\n    logs:\n      endpoint: http://logs.example:9000/ingest\n",
      {},
    );
    expect(signalTarget(c.otlp, "traces")).toMatchObject({ url: "https://collector.example:4443/otlp/v1/traces", insecure: false, address: "collector.example:4443" });
    expect(signalTarget(c.otlp, "logs")).toMatchObject({ url: "http://logs.example:9000/ingest", insecure: true });
  });

  test("host:port with http/protobuf: http, or https when insecure is false; a URL's scheme decides TLS for grpc too", () => {
    const c = parseConfig("otlp:\n  protocol: http/protobuf\n  endpoint: backend:4318\n  insecure: false\n", {});
    expect(signalTarget(c.otlp, "traces").url).toBe("https://backend:4318/v1/traces");
    const g = parseConfig("otlp:\n  endpoint: https://backend:4317\n", {});
    expect(signalTarget(g.otlp, "traces")).toMatchObject({ protocol: "grpc", address: "backend:4317", insecure: false });
  });

  test("per-signal protocol, headers, compression and timeout replace the generic ones for that signal only", () => {
    const c = parseConfig(
      "otlp:\n  headers:\n    a: '1'\n  signals:\n    metrics:\n      protocol: http/protobuf\n      headers:\n        b: '2'\n      compression: none\n      timeout: 3s\n",
      {},
    );
    expect(signalTarget(c.otlp, "traces")).toMatchObject({ protocol: "grpc", headers: { a: "1" }, compression: "gzip", timeoutMs: 10_000 });
    // No endpoint anywhere: the signal's protocol's default.
    expect(signalTarget(c.otlp, "metrics")).toMatchObject({ protocol: "http/protobuf", url: "http://127.0.0.1:4318/v1/metrics", headers: { b: "2" }, compression: "none", timeoutMs: 3000 });
  });

  test("bad endpoints and protocols are errors naming the key", () => {
    const problems = problemsOf("otlp:\n  protocol: http/json\n  endpoint: ftp://x:1\n  signals:\n    traces:\n      protocol: grpc\n      endpoint: http://x:4317/v1/traces\n      timeout: 0s\n");
    const byPath = Object.fromEntries(problems.map((p) => [p.path, p.message]));
    expect(byPath["otlp.protocol"]).toContain('expected one of "grpc", "http/protobuf"');
    expect(problemsOf("otlp:\n  endpoint: ftp://x:1\n")[0]).toMatchObject({ path: "otlp.endpoint", message: 'expected host:port or an http:// or https:// URL, got "ftp://x:1"' });
    const p2 = Object.fromEntries(problemsOf("otlp:\n  signals:\n    traces:\n      endpoint: http://x:4317/v1/traces\n      timeout: 0s\n").map((p) => [p.path, p.message]));
    expect(p2["otlp.signals.traces.endpoint"]).toContain("a gRPC endpoint has no path");
    expect(p2["otlp.signals.traces.timeout"]).toBe("must be greater than 0");
    expect(problemsOf("otlp:\n  endpoint: http://u:secret@x:1\n  protocol: http/protobuf\n")[0]!.message).not.toContain("secret");
    expect(problemsOf("otlp:\n  endpoint: http://x:4318\n  tls:\n    ca_file: /ca.pem\n")[0]).toMatchObject({
      path: "otlp.endpoint",
      message: "is an http:// URL but otlp.tls settings are given; write https:// to use TLS",
    });
  });
});

describe("OpenTelemetry environment variables", () => {
  const FILE = "service_name: from-file\notlp:\n  endpoint: file:4317\n  headers:\n    x-tenant: blue\n    x-api-key: file-key\n  compression: none\n";

  test("the generic variables override the file's keys; headers are merged over the file's", () => {
    const c = parseConfig(FILE, {
      OTEL_EXPORTER_OTLP_ENDPOINT: "https://env.example:4318",
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
      OTEL_EXPORTER_OTLP_HEADERS: "x-api-key=env%20key,authorization=Bearer%20abc",
      OTEL_EXPORTER_OTLP_COMPRESSION: "gzip",
      OTEL_EXPORTER_OTLP_TIMEOUT: "2500",
    });
    expect(c.otlp.endpoint).toBe("https://env.example:4318");
    expect(c.otlp.protocol).toBe("http/protobuf");
    expect(c.otlp.headers).toEqual({ "x-tenant": "blue", "x-api-key": "env key", authorization: "Bearer abc" });
    expect(c.otlp.compression).toBe("gzip");
    expect(c.otlp.timeout).toBe("2500ms");
    expect(signalTarget(c.otlp, "traces")).toMatchObject({ url: "https://env.example:4318/v1/traces", insecure: false, timeoutMs: 2500 });
  });

  test("unset or empty variables leave the file alone", () => {
    const c = parseConfig(FILE, { OTEL_EXPORTER_OTLP_ENDPOINT: "", OTEL_SERVICE_NAME: " " });
    expect(c.otlp.endpoint).toBe("file:4317");
    expect(c.service_name).toBe("from-file");
  });

  test("per-signal variables set otlp.signals.<signal>; the endpoint is used as it is", () => {
    const c = parseConfig("", {
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://traces.example:4318/custom",
      OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: "grpc",
      OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: "http://metrics.example:4317",
      OTEL_EXPORTER_OTLP_LOGS_HEADERS: "x-logs=1",
      OTEL_EXPORTER_OTLP_LOGS_TIMEOUT: "700",
      OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION: "none",
    });
    expect(signalTarget(c.otlp, "traces").url).toBe("http://traces.example:4318/custom");
    expect(signalTarget(c.otlp, "metrics")).toMatchObject({ protocol: "grpc", address: "metrics.example:4317", insecure: true });
    expect(signalTarget(c.otlp, "logs")).toMatchObject({ url: "http://127.0.0.1:4318/v1/logs", headers: { "x-logs": "1" }, timeoutMs: 700 });
    expect(signalTarget(c.otlp, "profiles").compression).toBe("none");
  });

  test("OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES set the agent's own resource; OTEL_SERVICE_NAME wins over service.name", () => {
    const c = parseConfig("resource_attributes:\n  team: a\n  zone: z1\n", { OTEL_RESOURCE_ATTRIBUTES: "service.name=from-attrs,team=b,deployment.environment=prod%2Feu" });
    expect(c.service_name).toBe("from-attrs");
    expect(c.resource_attributes).toEqual({ team: "b", zone: "z1", "deployment.environment": "prod/eu" });
    const d = parseConfig("", { OTEL_RESOURCE_ATTRIBUTES: "service.name=from-attrs", OTEL_SERVICE_NAME: "from-name" });
    expect(d.service_name).toBe("from-name");
  });

  test("TLS and insecure variables", () => {
    const c = parseConfig("", {
      OTEL_EXPORTER_OTLP_INSECURE: "false",
      OTEL_EXPORTER_OTLP_CERTIFICATE: "/etc/ca.pem",
      OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: "/etc/c.pem",
      OTEL_EXPORTER_OTLP_CLIENT_KEY: "/etc/k.pem",
    });
    expect(c.otlp.insecure).toBe(false);
    expect(c.otlp.tls).toMatchObject({ ca_file: "/etc/ca.pem", cert_file: "/etc/c.pem", key_file: "/etc/k.pem" });
  });

  test("malformed values are errors naming the variable; a header's value is never printed", () => {
    const problems = problemsOf("", {
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_EXPORTER_OTLP_COMPRESSION: "br",
      OTEL_EXPORTER_OTLP_TIMEOUT: "10s",
      OTEL_EXPORTER_OTLP_INSECURE: "maybe",
      OTEL_EXPORTER_OTLP_HEADERS: "x-api-key=top%ZZsecret",
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: "ok=1,=secretvalue",
      OTEL_EXPORTER_OTLP_LOGS_HEADERS: "justsecrettext",
    });
    const byPath = Object.fromEntries(problems.map((p) => [p.path, p.message]));
    expect(byPath["otlp.protocol"]).toContain("OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\": expected grpc or http/protobuf");
    expect(byPath["otlp.compression"]).toContain("OTEL_EXPORTER_OTLP_COMPRESSION");
    expect(byPath["otlp.timeout"]).toContain("milliseconds");
    expect(byPath["otlp.insecure"]).toContain("OTEL_EXPORTER_OTLP_INSECURE");
    expect(byPath["otlp.headers"]).toBe("OTEL_EXPORTER_OTLP_HEADERS: the value of entry 1 (x-api-key) is not valid percent-encoding");
    expect(byPath["otlp.signals.traces.headers"]).toBe("OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 2 is not key=value");
    expect(byPath["otlp.signals.logs.headers"]).toBe("OTEL_EXPORTER_OTLP_LOGS_HEADERS: entry 1 is not key=value");
    expect(JSON.stringify(problems)).not.toContain("secret");
    // A value the schema refuses is reported as coming from the variable, not from a place in the file.
    expect(problemsOf("", { OTEL_EXPORTER_OTLP_ENDPOINT: "ftp://x:1" })[0]).toMatchObject({ path: "otlp.endpoint", variable: "OTEL_EXPORTER_OTLP_ENDPOINT" });
  });

  test("a header neither transport can send is refused before start (grpc-js threw at the first export, printing the value); the value is never shown", () => {
    const env = problemsOf("", {
      OTEL_EXPORTER_OTLP_HEADERS: "k=TOPV%0Aevil,ok=fine",
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: "a%20b=TOPV",
      OTEL_EXPORTER_OTLP_LOGS_HEADERS: "x-bin=TOPV",
    });
    expect(env).toEqual([
      { path: "otlp.headers.k", message: expect.stringContaining("a header value cannot carry"), variable: "OTEL_EXPORTER_OTLP_HEADERS" },
      { path: "otlp.signals.traces.headers.a%20b", message: expect.stringContaining("not a valid header name"), variable: "OTEL_EXPORTER_OTLP_TRACES_HEADERS" },
      { path: "otlp.signals.logs.headers.x-bin", message: expect.stringContaining("-bin"), variable: "OTEL_EXPORTER_OTLP_LOGS_HEADERS" },
    ]);
    const file = problemsOf('otlp:\n  headers:\n    "x y": "a"\n    k: "TOPV\\u0000x"\n    fine: "Bearer abc.def"\n');
    expect(file.map((p) => [p.path, p.line])).toEqual([["otlp.headers.x y", 3], ["otlp.headers.k", 4]]);
    expect(JSON.stringify([env, file])).not.toContain("TOPV");
  });

  test("headers from the environment are secrets like the file's: redacted in the configuration view, scrubbed from logs", () => {
    const c = parseConfig("", { OTEL_EXPORTER_OTLP_HEADERS: "x-api-key=generic-secret", OTEL_EXPORTER_OTLP_METRICS_HEADERS: "x-api-key=metrics-secret,tenant=t1" });
    const shown = JSON.stringify(redactConfig(c));
    expect(shown).not.toContain("generic-secret");
    expect(shown).not.toContain("metrics-secret");
    expect(shown).not.toContain("t1");
    expect(secretsOf(c)).toEqual(expect.arrayContaining(["generic-secret", "metrics-secret", "t1"]));
  });
});

describe("documentation", () => {
  const SAMPLE: Record<string, string> = { ENDPOINT: "http://h:4318", PROTOCOL: "http/protobuf", HEADERS: "k=v", COMPRESSION: "none", TIMEOUT: "1234" };

  test("every documented variable sets the key it names", () => {
    const base = parseConfig("", {});
    const at = (c: unknown, key: string) => key.split(".").reduce((n: unknown, k) => (n as Record<string, unknown> | undefined)?.[k], c);
    for (const { variable, key } of OTEL_VARIABLES) {
      const suffix = variable.split("_").pop()!;
      const value =
        variable === "OTEL_SERVICE_NAME" ? "svc-x" : variable === "OTEL_RESOURCE_ATTRIBUTES" ? "a=b" : variable === "OTEL_EXPORTER_OTLP_INSECURE" ? "false" : /CERTIFICATE|KEY$/.test(variable) ? "/x.pem" : SAMPLE[suffix]!;
      const env: Record<string, string> = { [variable]: value };
      if (/CLIENT_(CERTIFICATE|KEY)$/.test(variable)) Object.assign(env, { OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: "/c.pem", OTEL_EXPORTER_OTLP_CLIENT_KEY: "/k.pem" });
      if (/CERTIFICATE|KEY$/.test(variable)) env.OTEL_EXPORTER_OTLP_INSECURE = "false";
      const c = parseConfig("", env);
      expect({ variable, changed: JSON.stringify(at(c, key)) !== JSON.stringify(at(base, key)) }).toEqual({ variable, changed: true });
    }
  });

  test("the README's variable table is the generated one", () => {
    const readme = readFileSync(join(import.meta.dir, "../../../README.md"), "utf8");
    const start = readme.indexOf("<!-- otel-env:start -->");
    const end = readme.indexOf("<!-- otel-env:end -->");
    expect(start).toBeGreaterThan(-1);
    // Regenerate with: bun run docs:config
    expect(readme.slice(start + "<!-- otel-env:start -->".length, end).trim()).toBe(otelVariablesMarkdown().trim());
  });
});
