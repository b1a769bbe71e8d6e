/**
 * Privileged e2e: HTTP/2 over TLS through the `tls` set. nghttpd (nghttp2-server: libssl.so.3, its socket I/O
 * inside SSL_read/SSL_write) serves files over TLS with ALPN h2; curl --http2 (libcurl on the same libssl) asks
 * for two paths on one connection. The plaintext frames reach the HTTP/2 parser like cleartext h2: the official
 * OTLP receiver must decode exactly those two exchanges as SERVER spans of nghttpd and CLIENT spans of curl, with
 * network.protocol.version 2 and url.scheme https.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { QUIET_CONFIG, spawnAgent, type AgentProcess } from "../../../helpers";
import { missingOfficialTools, startOfficialReceiver, type OfficialReceiver, type OfficialRequest } from "../../../helpers/official-receiver";
import { closedLoopbackPort } from "../../../helpers/ports";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";

setDefaultTimeout(90_000);

const isRoot = process.getuid?.() === 0;
/** nghttpd lives in /usr/sbin, outside some users' PATH. */
const NGHTTPD = Bun.which("nghttpd", { PATH: `${process.env.PATH ?? ""}:/usr/sbin` });
const ATTEMPTS = 3;
const ATTEMPT_WAIT_MS = 10_000;
/** curl's local ports per attempt: [base + i * n, base + (i + 1) * n), the pid's last digits keeping parallel runs apart. */
const ATTEMPT_PORTS = 20;
const ATTEMPT_PORT_BASE = 20_000 + (process.pid % 500) * ATTEMPTS * ATTEMPT_PORTS;
const missing = [...missingOfficialTools(), ...(Bun.which("curl") ? [] : ["curl"]), ...(NGHTTPD ? [] : ["nghttpd (nghttp2-server)"])];

interface Span {
  name: string;
  kind: string;
  attributes: Record<string, unknown>;
}

const attrs = (list: Array<{ key: string; value: Record<string, unknown> }> | undefined): Record<string, unknown> =>
  Object.fromEntries((list ?? []).map((a) => [a.key, "intValue" in a.value ? Number(a.value.intValue) : Object.values(a.value)[0]]));

function spans(reqs: OfficialRequest[]): Span[] {
  const out: Span[] = [];
  for (const r of reqs.filter((x) => x.signal === "traces"))
    for (const rs of r.message.resourceSpans ?? [])
      for (const ss of rs.scopeSpans ?? []) for (const s of ss.spans ?? []) out.push({ name: s.name, kind: s.kind, attributes: attrs(s.attributes) });
  return out;
}

async function until<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const end = performance.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(100);
  }
}

let rx: OfficialReceiver | undefined;
let agent: AgentProcess | undefined;
let server: Bun.Subprocess<"ignore", "ignore", "inherit"> | undefined;
let cert: SelfSignedCert | undefined;
let docroot = "";
let port = 0;

describe.skipIf(!isRoot || missing.length > 0)(`HTTP/2 over TLS from the TLS uprobes${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  beforeAll(async () => {
    cert = makeSelfSignedCert();
    docroot = mkdtempSync(join(tmpdir(), "svc-h2-docroot-"));
    writeFileSync(join(docroot, "hello.txt"), "hello over h2\n");
    rx = await startOfficialReceiver();
    const config = QUIET_CONFIG.replace("  ebpf:\n    enabled: false\n", "  ebpf:\n    enabled: true\n    network:\n      enabled: true\n      http: true\n      tls: true\n      max_spans_per_second: 2000\n");
    agent = await spawnAgent({ config: `${config}queues:\n  traces:\n    batch_timeout: 50ms\n`, env: { OTLP_ENDPOINT: rx.endpoint }, timeoutMs: 30_000 });
    await until("ebpf/tls attached", async () => ((await (await fetch(`${agent!.url}/status/ebpf`)).json()) as { tls?: unknown }).tls);
    port = closedLoopbackPort();
    server = Bun.spawn([NGHTTPD!, "--address", "127.0.0.1", "-d", docroot, String(port), `${cert.dir}/key.pem`, cert.certPath], { stdin: "ignore", stdout: "ignore", stderr: "inherit" });
    await until("nghttpd listening", async () => (await fetch(`http://127.0.0.1:${port}/`).then(() => true, (e: Error) => (/ECONNREFUSED|Unable to connect/i.test(e.message) ? undefined : true))));
  });

  afterAll(async () => {
    server?.kill();
    await server?.exited;
    await agent?.stop();
    await rx?.stop();
    if (cert) rmSync(cert.dir, { recursive: true, force: true });
    if (docroot) rmSync(docroot, { recursive: true, force: true });
  });

  test("two requests on one h2 connection become two SERVER and two CLIENT spans, version 2, url.scheme https", async () => {
    const serverPid = server!.pid;
    await until("libssl attached for nghttpd", async () => {
      const view = (await (await fetch(`${agent!.url}/status/ebpf`)).json()) as { tls?: Array<{ state: string; pids: number[] }> };
      return (view.tls ?? []).some((t) => t.state === "attached" && t.pids.includes(serverPid)) ? true : undefined;
    });
    const base = `https://127.0.0.1:${port}`;
    const https = (all: Span[]) => all.filter((s) => s.attributes["url.scheme"] === "https");
    const inRange = (p: unknown, lo: number) => typeof p === "number" && p >= lo && p < lo + ATTEMPT_PORTS;
    const serverOf = (all: Span[], lo: number) => https(all).filter((s) => s.attributes["process.pid"] === serverPid && s.kind === "SPAN_KIND_SERVER" && inRange(s.attributes["client.port"], lo));
    const clientOf = (all: Span[], pid: number) => https(all).filter((s) => s.attributes["process.pid"] === pid && s.kind === "SPAN_KIND_CLIENT");
    // The span budget is shared with every other exchange on this (shared) host: an attempt whose spans were
    // dropped as rate_limit in that second is tried again, each from its own local port range.
    let attempt: { lo: number; curlPid: number } | undefined;
    for (let i = 0; i < ATTEMPTS && !attempt; i++) {
      const lo = ATTEMPT_PORT_BASE + i * ATTEMPT_PORTS;
      const curl = Bun.spawn(["curl", "-sk", "--http2", "--local-port", `${lo}-${lo + ATTEMPT_PORTS - 1}`, "-o", "/dev/null", "-o", "/dev/null", `${base}/hello.txt`, `${base}/missing`], { stdout: "ignore", stderr: "pipe" });
      expect(await curl.exited).toBe(0);
      const done = await rx!.waitFor((all) => {
        void fetch(`${agent!.url}/admin/flush`, { method: "POST" }).catch(() => {});
        const sp = spans(all);
        return serverOf(sp, lo).length >= 2 && clientOf(sp, curl.pid).length >= 2;
      }, ATTEMPT_WAIT_MS).then(() => true, () => false);
      if (done) attempt = { lo, curlPid: curl.pid };
      else console.error(`attempt ${i + 1}: spans not all exported; agent metrics:\n${(await (await fetch(`${agent!.url}/metrics`)).text()).split("\n").filter((l) => /tls_events|spans_dropped_total/.test(l) && !l.startsWith("#")).join("\n")}`);
    }
    expect(attempt).toBeDefined();
    await Bun.sleep(500);
    const all = spans(rx!.requests());
    const summary = (list: Span[]) => list.map((s) => [s.attributes["http.request.method"], s.attributes["url.path"], s.attributes["http.response.status_code"], s.attributes["network.protocol.version"]]).sort((a, b) => String(a[1]).localeCompare(String(b[1])));
    const expected = [
      ["GET", "/hello.txt", 200, "2"],
      ["GET", "/missing", 404, "2"],
    ];
    expect(summary(serverOf(all, attempt!.lo))).toEqual(expected);
    expect(summary(clientOf(all, attempt!.curlPid))).toEqual(expected);
  });
});
