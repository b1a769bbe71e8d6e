/**
 * Component exporter/otlp: TLS (a test CA made with openssl), mutual TLS, the `export` status view, and reload
 * (reconnect on endpoint change, queue sizes applied, refusal that changes nothing).
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { FormatRegistry } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ExportViewSchema, EXPORT_STATUS } from "../../../src/export/status";
import type { Protocol } from "../../../src/export/config";
import { PROTOCOLS, TestBackend, expectExactAccounting, harness, spans, testConfig, waitUntil } from "./harness";

const open: Array<{ stop(): Promise<void> }> = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.stop();
});

let dir = "";
const pem = (name: string) => join(dir, name);

function openssl(...args: string[]): void {
  const r = Bun.spawnSync(["openssl", ...args], { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`openssl ${args.join(" ")}: ${r.stderr.toString()}`);
}

/** A CA, a server certificate for otlp.test and 127.0.0.1, a client certificate, and an unrelated CA. */
function makePki(): void {
  dir = mkdtempSync(join(tmpdir(), "svc-export-pki-"));
  const key = (name: string) => openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", pem(name));
  for (const ca of ["ca", "other-ca"]) {
    key(`${ca}.key`);
    openssl("req", "-x509", "-new", "-key", pem(`${ca}.key`), "-out", pem(`${ca}.pem`), "-days", "2", "-subj", `/CN=${ca}`);
  }
  const leaf = (name: string, cn: string, ext: string) => {
    key(`${name}.key`);
    openssl("req", "-new", "-key", pem(`${name}.key`), "-out", pem(`${name}.csr`), "-subj", `/CN=${cn}`);
    Bun.write(pem(`${name}.ext`), ext);
    openssl("x509", "-req", "-in", pem(`${name}.csr`), "-CA", pem("ca.pem"), "-CAkey", pem("ca.key"), "-CAcreateserial", "-out", pem(`${name}.pem`), "-days", "2", "-extfile", pem(`${name}.ext`));
  };
  leaf("server", "otlp.test", "subjectAltName=DNS:otlp.test,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
  leaf("client", "svc-agent", "extendedKeyUsage=clientAuth\n");
}

beforeAll(() => {
  makePki();
  // The HTTP layer registers formats for its validators; checking the view here needs date-time too.
  if (!FormatRegistry.Has("date-time")) FormatRegistry.Set("date-time", (v) => /^\d{4}-\d\d-\d\dT/.test(v) && !Number.isNaN(Date.parse(v)));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function tlsBackend(protocol: Protocol, mutual = false): Promise<TestBackend> {
  const b = await new TestBackend({
    protocol,
    tls: { cert: readFileSync(pem("server.pem")), key: readFileSync(pem("server.key")), ...(mutual ? { clientCa: readFileSync(pem("ca.pem")) } : {}) },
  }).start();
  open.push(b);
  return b;
}

for (const protocol of PROTOCOLS) {
  describe(`TLS over ${protocol}`, () => {
    test("exports over TLS verified against otlp.tls.ca_file, with otlp.tls.server_name", async () => {
      const backend = await tlsBackend(protocol);
      const h = harness(testConfig({ otlp: { protocol, endpoint: backend.endpoint, insecure: false, tls: { ca_file: pem("ca.pem"), server_name: "otlp.test" } } }));
      open.push(h);
      await h.start();
      h.pipeline.submit("traces", spans(3));
      expect((await h.pipeline.flush(5000)).exported).toMatchObject({ traces: 3 });
      expect(backend.items()).toBe(3);
      expect(h.component.view().tls).toBe(true);
      await waitUntil(() => h.readiness() === "ok", { what: "ready" });
      await expectExactAccounting(h);
    });

    test("mutual TLS with otlp.tls.cert_file and key_file", async () => {
      const backend = await tlsBackend(protocol, true);
      const h = harness(
        testConfig({
          otlp: {
            protocol,
            endpoint: backend.endpoint,
            insecure: false,
            tls: { ca_file: pem("ca.pem"), cert_file: pem("client.pem"), key_file: pem("client.key"), server_name: "otlp.test" },
          },
        }),
      );
      open.push(h);
      await h.start();
      h.pipeline.submit("logs", [{ observedTimeUnixNano: 5n, body: "over mTLS" }]);
      expect((await h.pipeline.flush(5000)).exported).toMatchObject({ logs: 1 });
      expect(backend.items("logs")).toBe(1);
      // Without the client certificate the backend refuses the connection.
      const anonymous = harness(testConfig({ otlp: { protocol, endpoint: backend.endpoint, insecure: false, tls: { ca_file: pem("ca.pem"), server_name: "otlp.test" } } }));
      open.push(anonymous);
      await anonymous.start();
      anonymous.pipeline.submit("logs", [{ observedTimeUnixNano: 6n, body: "no client certificate" }]);
      await waitUntil(() => anonymous.readiness().startsWith("failed: "), { what: "refused without a client certificate" });
      expect(backend.items("logs")).toBe(1);
    });

    test("a backend whose certificate the CA did not sign is not trusted: readiness fails, nothing is exported", async () => {
      const backend = await tlsBackend(protocol);
      const h = harness(testConfig({ otlp: { protocol, endpoint: backend.endpoint, insecure: false, tls: { ca_file: pem("other-ca.pem"), server_name: "otlp.test" } } }));
      open.push(h);
      await h.start();
      h.pipeline.submit("traces", spans(2));
      await waitUntil(() => h.readiness().startsWith("failed: "), { what: "readiness to fail" });
      expect(backend.items()).toBe(0);
      expect(h.pipeline.accounting().traces.exported).toBe(0);
      await expectExactAccounting(h);
    });
  });
}

describe("status view and reload", () => {
  test("the export view matches ExportViewSchema and is published under EXPORT_STATUS.name until shutdown", async () => {
    const backend = await new TestBackend().start();
    open.push(backend);
    const h = harness(testConfig({ otlp: { endpoint: backend.endpoint }, queues: { traces: { capacity: 1234 } } }));
    await h.start();
    h.pipeline.submit("traces", spans(4));
    await h.pipeline.flush(5000);
    await waitUntil(() => h.component.view().connected, { what: "connected" });
    const view = h.status.view(EXPORT_STATUS.name);
    expect(Value.Check(ExportViewSchema, view)).toBe(true);
    expect(view).toMatchObject({
      endpoint: backend.endpoint,
      protocol: "grpc",
      tls: false,
      compression: "gzip",
      connected: true,
      last_error: null,
      queues: { traces: { size: 0, capacity: 1234, exported: 4, dropped: 0 } },
    });
    expect(Date.parse(h.component.view().last_export!)).toBeGreaterThan(0);
    await h.stop();
    expect(h.status.view(EXPORT_STATUS.name)).toBeUndefined();
  });

  test("reload: a new endpoint reconnects, new queue sizes apply", async () => {
    const a = await new TestBackend().start();
    const b = await new TestBackend().start();
    open.push(a, b);
    const first = testConfig({ otlp: { endpoint: a.endpoint }, queues: { traces: { capacity: 5 } } });
    const h = harness(first);
    open.push(h);
    await h.start();
    h.pipeline.submit("traces", spans(2));
    await h.pipeline.flush(5000);
    const next = testConfig({ otlp: { endpoint: b.endpoint }, queues: { traces: { capacity: 50 } } });
    await h.component.reload(next, first);
    expect(h.component.view().endpoint).toBe(b.endpoint);
    expect(h.pipeline.submit("traces", spans(20))).toBe(20);
    await h.pipeline.flush(5000);
    expect(a.items()).toBe(2);
    expect(b.items()).toBe(20);
    expect(h.component.view().queues.traces.capacity).toBe(50);
    await expectExactAccounting(h);
  });

  test("reload from grpc to http/protobuf: the next exports go over OTLP/HTTP, accounting stays exact", async () => {
    const g = await new TestBackend().start();
    const web = await new TestBackend({ protocol: "http/protobuf" }).start();
    open.push(g, web);
    const first = testConfig({ otlp: { endpoint: g.endpoint } });
    const h = harness(first);
    open.push(h);
    await h.start();
    h.pipeline.submit("traces", spans(2));
    await h.pipeline.flush(5000);
    const next = testConfig({ otlp: { protocol: "http/protobuf", endpoint: `http://${web.endpoint}` } });
    await h.component.reload(next, first);
    expect(h.component.view()).toMatchObject({ protocol: "http/protobuf", endpoint: `http://${web.endpoint}` });
    h.pipeline.submit("traces", spans(5));
    await h.pipeline.flush(5000);
    expect(g.items()).toBe(2);
    expect(web.items()).toBe(5);
    await waitUntil(() => h.readiness() === "ok", { what: "ready over OTLP/HTTP" });
    await expectExactAccounting(h);
  });

  test("reload that cannot be applied (unreadable CA file) throws and changes nothing", async () => {
    const a = await new TestBackend().start();
    open.push(a);
    const first = testConfig({ otlp: { endpoint: a.endpoint }, queues: { traces: { capacity: 5 } } });
    const h = harness(first);
    open.push(h);
    await h.start();
    const bad = testConfig({ otlp: { endpoint: "127.0.0.1:1", insecure: false, tls: { ca_file: join(dir, "missing.pem") } }, queues: { traces: { capacity: 50 } } });
    await expect(h.component.reload(bad, first)).rejects.toThrow(/otlp\.tls\.ca_file/);
    expect(h.component.view().endpoint).toBe(a.endpoint);
    expect(h.component.view().queues.traces.capacity).toBe(5);
    h.pipeline.submit("traces", spans(3));
    await h.pipeline.flush(5000);
    expect(a.items()).toBe(3);
  });
});
