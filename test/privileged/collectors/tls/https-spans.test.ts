/**
 * Privileged e2e: dist/svc-agent with the `tls` set on the real kernel. Python's http.server wrapped in ssl
 * (/usr/bin/python3, whose _ssl module links libssl.so.3 dynamically) serves HTTPS; curl (libcurl, the same
 * libssl) sends a known set of requests on one keep-alive connection. The spans decoded by the official OTLP
 * receiver (protoc-generated Python, Debian's grpcio) must be exactly those requests, as SERVER spans of the
 * Python process and CLIENT spans of curl, with url.scheme https and the connection's addresses.
 * /status/ebpf lists libssl as attached with the server's pid; once the server exits its pid is released. Bun (this
 * test's runner) carries BoringSSL without symbols: it is listed as not traceable, with the reason.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { rmSync } from "node:fs";
import { resolve } from "node:path";
import { QUIET_CONFIG, spawnAgent, type AgentProcess } from "../../../helpers";
import { missingOfficialTools, startOfficialReceiver, type OfficialReceiver, type OfficialRequest } from "../../../helpers/official-receiver";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";

setDefaultTimeout(90_000);

const isRoot = process.getuid?.() === 0;
const missing = [...missingOfficialTools(), ...(Bun.which("curl") ? [] : ["curl"]), ...(Bun.which("openssl") ? [] : ["openssl"])];
const SERVER = resolve(import.meta.dir, "../../../fixtures/https-server.py");
const ATTEMPTS = 3;
const ATTEMPT_WAIT_MS = 10_000;
/** curl's local ports per attempt: [base + i * n, base + (i + 1) * n), the pid's last digits keeping parallel runs apart. */
const ATTEMPT_PORTS = 20;
const ATTEMPT_PORT_BASE = 20_000 + (process.pid % 500) * ATTEMPTS * ATTEMPT_PORTS;

interface TlsTarget {
  path: string;
  kind: string;
  state: string;
  reason?: string;
  functions: string[];
  processes: number;
  pids: number[];
}

interface Span {
  name: string;
  kind: string;
  attributes: Record<string, unknown>;
}

/** Attributes by key; int values (strings in MessageToDict's JSON) as numbers. */
const attrs = (list: Array<{ key: string; value: Record<string, unknown> }> | undefined): Record<string, unknown> =>
  Object.fromEntries((list ?? []).map((a) => [a.key, "intValue" in a.value ? Number(a.value.intValue) : Object.values(a.value)[0]]));

function spans(reqs: OfficialRequest[]): Span[] {
  const out: Span[] = [];
  for (const r of reqs.filter((x) => x.signal === "traces"))
    for (const rs of r.message.resourceSpans ?? [])
      for (const ss of rs.scopeSpans ?? []) for (const s of ss.spans ?? []) out.push({ name: s.name, kind: s.kind, attributes: attrs(s.attributes) });
  return out;
}

let rx: OfficialReceiver | undefined;
let agent: AgentProcess | undefined;
let server: Bun.Subprocess<"ignore", "pipe", "inherit"> | undefined;
let cert: SelfSignedCert | undefined;
let port = 0;

async function tlsTargets(): Promise<TlsTarget[]> {
  const r = await fetch(`${agent!.url}/status/ebpf`);
  return ((await r.json()) as { tls?: TlsTarget[] }).tls ?? [];
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

describe.skipIf(!isRoot || missing.length > 0)(`HTTPS spans from the TLS uprobes${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  beforeAll(async () => {
    cert = makeSelfSignedCert();
    rx = await startOfficialReceiver();
    const config = QUIET_CONFIG.replace("otlp:\n", "otlp:\n  compression: gzip\n").replace(
      "  ebpf:\n    enabled: false\n",
      `  ebpf:
    enabled: true
    network:
      enabled: true
      http: true
      tls: true
      max_spans_per_second: 2000
`,
    );
    agent = await spawnAgent({ config: `${config}queues:\n  traces:\n    batch_timeout: 50ms\n`, env: { OTLP_ENDPOINT: rx.endpoint }, timeoutMs: 30_000 });
    await until("ebpf/tls attached", async () => ((await (await fetch(`${agent!.url}/status/ebpf`)).json()) as { tls?: unknown }).tls);
    server = Bun.spawn(["/usr/bin/python3", SERVER, cert.certPath, `${cert.dir}/key.pem`], { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
    const reader = server.stdout.getReader();
    let text = "";
    while (!text.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) throw new Error("https server exited before printing its port");
      text += new TextDecoder().decode(value);
    }
    reader.releaseLock();
    port = Number(text.trim());
  });

  afterAll(async () => {
    server?.kill();
    await server?.exited;
    await agent?.stop();
    await rx?.stop();
    if (cert) rmSync(cert.dir, { recursive: true, force: true });
  });

  test("libssl of the running server is attached, then its requests become exact SERVER and CLIENT spans with url.scheme https", async () => {
    const serverPid = server!.pid;
    const lib = await until("libssl attached for the server", async () => {
      const t = (await tlsTargets()).find((x) => x.kind === "shared" && x.pids.includes(serverPid));
      return t?.state === "attached" ? t : undefined;
    });
    expect(lib.path).toMatch(/libssl\.so\.3$/);
    expect(lib.functions).toEqual(expect.arrayContaining(["SSL_read", "SSL_write"]));

    const base = `https://127.0.0.1:${port}`;
    const expected = [
      ["GET", "/hello", 200],
      ["GET", "/missing", 404],
      ["GET", "/a/b/c", 200],
      ["POST", "/submit", 201],
    ];
    const https = (all: Span[]) => all.filter((s) => s.attributes["url.scheme"] === "https");
    // Spans of one attempt: curl's own (its pid) and the server's for connections from curl's port range.
    const inRange = (p: unknown, lo: number) => typeof p === "number" && p >= lo && p < lo + ATTEMPT_PORTS;
    const serverOf = (all: Span[], lo: number) => https(all).filter((s) => s.attributes["process.pid"] === server!.pid && s.kind === "SPAN_KIND_SERVER" && inRange(s.attributes["client.port"], lo));
    const clientOf = (all: Span[], pid: number) => https(all).filter((s) => s.attributes["process.pid"] === pid && s.kind === "SPAN_KIND_CLIENT");
    // The span budget is shared with every other exchange on this (shared) host: an attempt whose spans were
    // dropped as rate_limit in that second is tried again, each from its own local port range.
    let attempt: { lo: number; curlPid: number } | undefined;
    for (let i = 0; i < ATTEMPTS && !attempt; i++) {
      const lo = ATTEMPT_PORT_BASE + i * ATTEMPT_PORTS;
      const range = ["--local-port", `${lo}-${lo + ATTEMPT_PORTS - 1}`];
      const curl = Bun.spawn(
        ["curl", "-sk", "--http1.1", ...range, "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", `${base}/hello?x=1`, `${base}/missing`, `${base}/a/b/c?q=2`,
          "--next", "-sk", "--http1.1", ...range, "-o", "/dev/null", "-d", "k=v", `${base}/submit`],
        { stdout: "ignore", stderr: "pipe" },
      );
      expect(await curl.exited).toBe(0);
      const done = await rx!.waitFor((all) => {
        void fetch(`${agent!.url}/admin/flush`, { method: "POST" }).catch(() => {});
        const sp = spans(all);
        return serverOf(sp, lo).length >= 4 && clientOf(sp, curl.pid).length >= 4;
      }, ATTEMPT_WAIT_MS).then(() => true, () => false);
      if (done) attempt = { lo, curlPid: curl.pid };
      else console.error(`attempt ${i + 1}: spans not all exported; agent metrics:\n${(await (await fetch(`${agent!.url}/metrics`)).text()).split("\n").filter((l) => /tls_events|spans_dropped_total\{reason="rate_limit"/.test(l) && !l.startsWith("#")).join("\n")}`);
    }
    expect(attempt).toBeDefined();
    const reqs = rx!.requests();
    expect(reqs.flatMap((r) => r.unknown_fields)).toEqual([]);
    // A moment for any extra span to arrive (there must be none).
    await Bun.sleep(500);
    const all = spans(rx!.requests());
    const serverSpans = serverOf(all, attempt!.lo);
    const clientSpans = clientOf(all, attempt!.curlPid);
    const summary = (list: Span[]) => list.map((s) => [s.attributes["http.request.method"], s.attributes["url.path"], s.attributes["http.response.status_code"]]);
    expect(summary(serverSpans)).toEqual(expected);
    expect(summary(clientSpans)).toEqual(expected);
    for (const s of serverSpans) {
      expect(s.name).toBe(String(s.attributes["http.request.method"]));
      expect(s.attributes["server.port"]).toBe(port);
      expect(s.attributes["network.local.address"]).toBe("127.0.0.1");
      expect(s.attributes["client.address"]).toBe("127.0.0.1");
      expect(s.attributes["network.protocol.version"]).toBe("1.1");
    }
    for (const s of clientSpans) {
      expect(s.attributes["server.address"]).toBe("127.0.0.1");
      expect(s.attributes["server.port"]).toBe(port);
      expect(s.attributes["network.peer.port"]).toBe(port);
    }
    // Nothing else from that attempt: no duplicate from SSL_read calling SSL_read_ex, no span of another kind.
    expect(https(all).filter((s) => inRange(s.attributes["client.port"], attempt!.lo) || s.attributes["process.pid"] === attempt!.curlPid).length).toBe(8);
    // The ciphertext on the socket makes no http span.
    expect(all.filter((s) => s.attributes["url.scheme"] === "http" && s.attributes["server.port"] === port)).toEqual([]);
  });

  test("Bun, with BoringSSL linked in without symbols, is listed as not traceable with the reason", async () => {
    const runner = await until("this test runner listed", async () => (await tlsTargets()).find((t) => t.pids.includes(process.pid)));
    expect(runner).toMatchObject({ kind: "static", state: "not_traceable", functions: [] });
    expect(runner.reason).toBe("BoringSSL linked statically without SSL_read/SSL_write symbols (stripped): not traceable");
  });

  test("the server's exit releases its pid from the library", async () => {
    const pid = server!.pid;
    server!.kill();
    await server!.exited;
    await until("server pid released", async () => ((await tlsTargets()).some((t) => t.pids.includes(pid)) ? undefined : true));
  });
});
