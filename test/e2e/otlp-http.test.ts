/**
 * e2e: the compiled agent configured only by the OpenTelemetry environment variables (OTLP/HTTP protobuf to the
 * official receiver's HTTP side: Python's http.server and protoc-generated stubs of opentelemetry-proto v1.11.0).
 * What arrives: requests on the OTLP paths with no field the schema does not know, gzip, the headers of
 * OTEL_EXPORTER_OTLP_HEADERS, the user agent, the resource of OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
 * What the agent shows: protocol http/protobuf, and the header values only as [REDACTED] in /config,
 * --validate-config output and the diagnostics bundle. `help config` documents the protocol and the variables.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { OTEL_VARIABLES } from "../../src/config/env";
import { BINARY, QUIET_CONFIG, spawnAgent, type AgentProcess } from "../helpers";
import { missingOfficialTools, startOfficialReceiver, type OfficialReceiver, type OfficialRequest } from "../helpers/official-receiver";

const missing = missingOfficialTools();
const SECRET = "e2e-otel-secret-8c1f";
/** The file's otlp.endpoint (127.0.0.1:4317 without OTLP_ENDPOINT) is overridden by OTEL_EXPORTER_OTLP_ENDPOINT. */
const CONFIG = `${QUIET_CONFIG.replace("self_telemetry:\n", "self_telemetry:\n  tracing:\n    enabled: true\n    sample_rate: 1.0\n")}queues:\n  traces:\n    batch_timeout: 50ms\n`;

let dir = "";
let rx: OfficialReceiver;
let agent: AgentProcess;
let env: Record<string, string> = {};

beforeAll(async () => {
  if (missing.length) return;
  dir = mkdtempSync(join(tmpdir(), "svc-otlp-http-e2e-"));
  rx = await startOfficialReceiver({ http: true });
  env = {
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
    OTEL_EXPORTER_OTLP_ENDPOINT: rx.httpEndpoint!,
    OTEL_EXPORTER_OTLP_HEADERS: `x-api-key=${SECRET},x-tenant=blue%20team`,
    OTEL_EXPORTER_OTLP_COMPRESSION: "gzip",
    OTEL_SERVICE_NAME: "e2e-otel-env",
    OTEL_RESOURCE_ATTRIBUTES: "deployment.environment=e2e,team=observability",
  };
  agent = await spawnAgent({ config: CONFIG, env });
});

afterAll(async () => {
  await agent?.stop();
  await rx?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const spansOf = (reqs: OfficialRequest[]) =>
  reqs.filter((r) => r.signal === "traces").flatMap((r) => (r.message.resourceSpans ?? []).flatMap((rs: any) => rs.scopeSpans.flatMap((ss: any) => ss.spans.map((s: any) => ({ s, rs })))));

describe.skipIf(missing.length > 0)(`OTLP/HTTP from OTEL_* variables${missing.length ? `: missing ${missing.join(", ")}` : ""}`, () => {
  test("self-tracing spans arrive over OTLP/HTTP with the variables' headers, resource and gzip; every field known", async () => {
    const reqs = await rx.waitFor((all) => {
      void fetch(`${agent.url}/admin/flush`, { method: "POST" }).catch(() => {});
      return spansOf(all).some(({ s }) => s.name.includes("/admin/flush"));
    }, 30_000);
    const traces = reqs.filter((r) => r.signal === "traces");
    expect(traces.length).toBeGreaterThan(0);
    for (const r of traces) {
      expect(r.transport).toBe("http");
      expect(r.unknown_fields).toEqual([]);
      expect(r.metadata?.["content-type"]).toBe("application/x-protobuf");
      expect(r.metadata?.["content-encoding"]).toBe("gzip");
      expect(r.metadata?.["x-api-key"]).toBe(SECRET);
      expect(r.metadata?.["x-tenant"]).toBe("blue team");
      expect(r.metadata?.["user-agent"]).toMatch(/^svc-agent\/\S+ Bun\/\d/);
    }
    const own = spansOf(reqs).find(({ s }) => s.name.includes("/admin/flush"))!;
    const resource = Object.fromEntries(own.rs.resource.attributes.map((a: any) => [a.key, a.value.stringValue]));
    expect(resource).toMatchObject({ "service.name": "e2e-otel-env", "deployment.environment": "e2e", team: "observability" });
  });

  test("/status/export says http/protobuf; /config shows the variables' headers as [REDACTED]", async () => {
    const view = (await (await fetch(`${agent.url}/status/export`)).json()) as { protocol: string; endpoint: string; connected: boolean };
    expect(view.protocol).toBe("http/protobuf");
    expect(view.endpoint).toBe(rx.httpEndpoint!);
    const text = await (await fetch(`${agent.url}/config`)).text();
    expect(text).not.toContain(SECRET);
    expect(text).not.toContain("blue team");
    const config = JSON.parse(text) as { otlp: { headers: Record<string, string>; protocol: string } };
    expect(config.otlp.headers).toEqual({ "x-api-key": "[REDACTED]", "x-tenant": "[REDACTED]" });
    expect(config.otlp.protocol).toBe("http/protobuf");
  });

  test("--validate-config and the diagnostics bundle never show a header value from the environment", async () => {
    const path = join(dir, "config.yaml");
    writeFileSync(path, CONFIG);
    const run = (args: string[], extra: Record<string, string> = {}) =>
      Bun.spawnSync([BINARY, ...args], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env, ...extra }, stdout: "pipe", stderr: "pipe" });
    const ok = run(["--validate-config", path]);
    expect(ok.exitCode).toBe(0);
    expect(ok.stdout.toString()).toContain(`export to ${rx.httpEndpoint} over http/protobuf`);
    expect(ok.stdout.toString() + ok.stderr.toString()).not.toContain(SECRET);
    // A malformed variable is named; the secret beside it is not printed.
    const bad = run(["--validate-config", path], { OTEL_EXPORTER_OTLP_HEADERS: `x-api-key=${SECRET},broken`, OTEL_EXPORTER_OTLP_TIMEOUT: "soon" });
    expect(bad.exitCode).toBe(2);
    const out = bad.stdout.toString() + bad.stderr.toString();
    expect(out).toContain("OTEL_EXPORTER_OTLP_HEADERS: entry 2 is not key=value");
    expect(out).toContain("OTEL_EXPORTER_OTLP_TIMEOUT");
    expect(out).not.toContain(SECRET);

    const bundle = join(dir, "bundle.tar.gz");
    const diag = run(["diagnostics", "--config", path, "--output", bundle]);
    expect(diag.exitCode).toBe(0);
    const listing = Bun.spawnSync(["tar", "-xzOf", bundle], { stdout: "pipe" });
    expect(listing.exitCode).toBe(0);
    const contents = listing.stdout.toString();
    expect(contents).toContain("http/protobuf");
    expect(contents).toContain("[REDACTED]");
    expect(contents).not.toContain(SECRET);
  });
});

test("help config lists otlp.protocol and every OpenTelemetry variable", () => {
  const r = Bun.spawnSync([BINARY, "help", "config"], { stdout: "pipe", stderr: "pipe" });
  expect(r.exitCode).toBe(0);
  const text = r.stdout.toString();
  expect(text).toContain('| `otlp.protocol` | "grpc" \\| "http/protobuf" | `"grpc"` |');
  for (const { variable } of OTEL_VARIABLES) expect(text).toContain(`| \`${variable}\` |`);
  expect(text).toContain("then the `SVC_*` overrides, then these variables");
});
