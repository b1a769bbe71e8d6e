/**
 * e2e: what the compiled agent exports, decoded by the official OTLP schema with code the project did not
 * write (test/helpers/official-receiver: protoc-generated Python stubs, Debian's grpcio). Traces (self-tracing),
 * metrics (GPU metrics from the NVML stand-in) and logs (a tailed file) arrive with no field the schema does not
 * know. The receiver's OTLP/HTTP side answers a gzip protobuf POST from curl. The privileged layer does the
 * same for all four signals (test/privileged/collectors/official-otlp.test.ts).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { appendFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { gzipSync } from "node:zlib";
import { buildRequest, ItemEncoder } from "../../src/export/encode";
import type { LogRecordItem } from "../../src/export/model";
import { ResourceBuilder } from "../../src/export/resource";
import { spawnAgent, type AgentProcess } from "../helpers";
import { checkOfficial, gpuAndLogsBlocks, missingOfficialTools, officialAgentConfig, ofSignal as of, PROTO_ROOT, startOfficialReceiver, type OfficialReceiver, type OfficialRequest } from "../helpers/official-receiver";

const missing = missingOfficialTools();
const LINES = 20;
/** The release as published, where this machine has it (the vendored copy must equal it). */
const RELEASE = "/work/shared/opentelemetry-proto-v1.11.0";

let dir = "";
let rx: OfficialReceiver;
let agent: AgentProcess;

beforeAll(async () => {
  if (missing.length) return;
  dir = mkdtempSync(join(tmpdir(), "svc-official-e2e-"));
  const blocks = gpuAndLogsBlocks(dir, "200ms");
  rx = await startOfficialReceiver();
  const config = officialAgentConfig(`  ebpf:\n    enabled: false\n${blocks}`, "  headers:\n    x-e2e: official\n");
  agent = await spawnAgent({ config: `${config}service_name: e2e-official\n`, env: { OTLP_ENDPOINT: rx.endpoint } });
});

afterAll(async () => {
  await agent?.stop();
  await rx?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});


describe.skipIf(missing.length > 0)(`official OTLP decoding (protoc + grpcio)${missing.length ? `: missing ${missing.join(", ")}` : ""}`, () => {
  test("traces, metrics and logs from the compiled agent: every field known to opentelemetry-proto v1.11.0", async () => {
    for (let i = 0; i < LINES; i++) appendFileSync(join(dir, "app.log"), `official line ${i}\n`);
    const logLines = (reqs: OfficialRequest[]) =>
      of(reqs, "logs").flatMap((r) => (r.message.resourceLogs ?? []).flatMap((rl: any) => rl.scopeLogs.flatMap((sl: any) => sl.logRecords.map((lr: any) => lr.body.stringValue))));
    const metricNames = (reqs: OfficialRequest[]) =>
      new Set<string>(of(reqs, "metrics").flatMap((r) => (r.message.resourceMetrics ?? []).flatMap((rm: any) => rm.scopeMetrics.flatMap((sm: any) => sm.metrics.map((m: any) => m.name)))));
    // (An empty request may come first: the exporter's connection probe.)
    const spansOf = (reqs: OfficialRequest[]) =>
      of(reqs, "traces").flatMap((r) => (r.message.resourceSpans ?? []).flatMap((rs: any) => rs.scopeSpans.flatMap((ss: any) => ss.spans)));
    const reqs = await rx.waitFor((all) => {
      if (logLines(all).length < LINES || metricNames(all).size === 0) {
        // Each flush is an HTTP request the self-tracer records: the spans follow in a later batch.
        void fetch(`${agent.url}/admin/flush`, { method: "POST" }).catch(() => {});
        return false;
      }
      return spansOf(all).some((s: any) => s.name.includes("/admin/flush"));
    }, 30_000);

    expect(reqs.flatMap((r) => r.unknown_fields)).toEqual([]);
    expect(reqs.flatMap((r) => [...r.index_errors, ...r.table_errors])).toEqual([]);

    expect(logLines(reqs)).toEqual(Array.from({ length: LINES }, (_, i) => `official line ${i}`));
    const resource = Object.fromEntries(of(reqs, "logs")[0]!.message.resourceLogs[0].resource.attributes.map((a: any) => [a.key, a.value.stringValue]));
    // A host file no workload is known for is not exported as the agent; the agent's own spans are (service_name, telemetry.sdk.*).
    expect(resource["service.name"]).toBe("unknown_service");
    const own = of(reqs, "traces").flatMap((r) => r.message.resourceSpans ?? []).find((rs: any) => rs.scopeSpans.some((ss: any) => ss.spans.some((x: any) => x.name.includes("/admin/flush"))));
    const ownResource = Object.fromEntries(own.resource.attributes.map((a: any) => [a.key, a.value.stringValue]));
    expect(ownResource).toMatchObject({ "service.name": "e2e-official", "telemetry.sdk.name": "svc-agent", "telemetry.sdk.language": "nodejs" });
    expect(of(reqs, "logs")[0]!.metadata?.["x-e2e"]).toBe("official");

    expect([...metricNames(reqs)].some((n) => n.startsWith("gpu."))).toBe(true);
    for (const r of of(reqs, "metrics"))
      for (const rm of r.message.resourceMetrics ?? [])
        for (const sm of rm.scopeMetrics)
          for (const m of sm.metrics) for (const p of (m.gauge ?? m.sum)?.dataPoints ?? []) expect(BigInt(p.timeUnixNano)).toBeGreaterThan(0n);

    const spans = spansOf(reqs);
    expect(spans.length).toBeGreaterThan(0);
    expect(spans.some((s: any) => s.name.includes("/admin/flush"))).toBe(true);
    for (const s of spans) {
      expect(Buffer.from(s.traceId, "base64")).toHaveLength(16);
      expect(Buffer.from(s.spanId, "base64")).toHaveLength(8);
      expect(BigInt(s.endTimeUnixNano)).toBeGreaterThanOrEqual(BigInt(s.startTimeUnixNano));
    }
  });

  test("its OTLP/HTTP side: a gzip protobuf POST (curl) is decoded and answered with the protobuf response", async () => {
    const web = await startOfficialReceiver({ http: true });
    try {
      const res = new ResourceBuilder("e2e-official-http");
      const records: LogRecordItem[] = Array.from({ length: 3 }, (_, i) => ({ observedTimeUnixNano: BigInt(i + 1), body: `http line ${i}` }));
      const enc = new ItemEncoder(res.encoder);
      const body = gzipSync(buildRequest("logs", records.map((r) => enc.encode("logs", r)), res.encoder));
      const file = join(dir, "logs.pb.gz");
      writeFileSync(file, body);
      const curl = Bun.spawnSync(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{content_type}", "-H", "Content-Type: application/x-protobuf", "-H", "Content-Encoding: gzip", "--data-binary", `@${file}`, `${web.httpEndpoint}/v1/logs`]);
      expect(curl.stdout.toString()).toBe("200 application/x-protobuf");
      const [rep] = await web.waitFor((all) => all.length > 0);
      expect(rep!).toMatchObject({ signal: "logs", transport: "http", unknown_fields: [], table_errors: [] });
      expect(rep!.metadata?.["content-encoding"]).toBe("gzip");
      expect(rep!.message.resourceLogs[0].scopeLogs[0].logRecords.map((r: any) => r.body.stringValue)).toEqual(["http line 0", "http line 1", "http line 2"]);
    } finally {
      await web.stop();
    }
  });

  test("the checker finds unknown fields (a request of a field number the schema lacks)", () => {
    // ExportLogsServiceRequest { resource_logs { scope_logs { log_records { 99: 1 } } } }
    const body = new Uint8Array([0x0a, 0x07, 0x12, 0x05, 0x12, 0x03, 0x98, 0x06, 0x01]);
    const rep = checkOfficial("logs", body);
    expect(rep.unknown_fields).toEqual(["resource_logs[0].scope_logs[0].log_records[0]: fields [99]"]);
  });
});

test.skipIf(!existsSync(RELEASE))("proto/opentelemetry is the opentelemetry-proto v1.11.0 release, byte for byte", () => {
  const files = (root: string): string[] => {
    const out: string[] = [];
    const walk = (d: string) => {
      for (const e of readdirSync(d)) {
        const p = join(d, e);
        if (statSync(p).isDirectory()) walk(p);
        else out.push(relative(root, p));
      }
    };
    walk(root);
    return out.sort();
  };
  const vendored = files(join(PROTO_ROOT, "opentelemetry"));
  expect(vendored).toEqual(files(join(RELEASE, "opentelemetry")));
  for (const f of vendored) expect(readFileSync(join(PROTO_ROOT, "opentelemetry", f)).equals(readFileSync(join(RELEASE, "opentelemetry", f))), f).toBe(true);
  expect(readFileSync(join(PROTO_ROOT, "LICENSE")).equals(readFileSync(join(RELEASE, "LICENSE")))).toBe(true);
});
