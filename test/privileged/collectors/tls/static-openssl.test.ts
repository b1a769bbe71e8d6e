/**
 * Privileged e2e: OpenSSL linked statically. node carries OpenSSL with its symbols: the `tls` set finds
 * SSL_read/SSL_write in the executable and probes it (kind `static`); an https server in node answered by curl
 * gives SERVER spans of node (url.scheme https; node does its socket I/O outside the SSL calls, through memory
 * BIOs, so these spans carry no socket addresses) decoded by the official OTLP receiver.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { realpathSync, rmSync } from "node:fs";
import { resolve } from "node:path";
import { QUIET_CONFIG, spawnAgent, type AgentProcess } from "../../../helpers";
import { missingOfficialTools, startOfficialReceiver, type OfficialReceiver, type OfficialRequest } from "../../../helpers/official-receiver";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";

setDefaultTimeout(90_000);

const isRoot = process.getuid?.() === 0;
const NODE = Bun.which("node");
/** A node built against the system's libssl (Debian's nodejs) is traced through libssl: no static case to test. */
const NODE_STATIC = NODE !== null && !Bun.spawnSync(["ldd", NODE]).stdout.toString().includes("libssl");
const missing = [...missingOfficialTools(), ...(Bun.which("curl") ? [] : ["curl"]), ...(NODE ? (NODE_STATIC ? [] : ["a node with OpenSSL linked in (this one uses the shared libssl)"]) : ["node"])];
const SERVER = resolve(import.meta.dir, "../../../fixtures/node-https-server.cjs");
const ATTEMPTS = 3;
const ATTEMPT_WAIT_MS = 10_000;

interface Span {
  kind: string;
  attributes: Record<string, unknown>;
}
interface TlsTarget {
  path: string;
  kind: string;
  state: string;
  reason?: string;
  functions: string[];
  pids: number[];
}

const attrs = (list: Array<{ key: string; value: Record<string, unknown> }> | undefined): Record<string, unknown> =>
  Object.fromEntries((list ?? []).map((a) => [a.key, "intValue" in a.value ? Number(a.value.intValue) : Object.values(a.value)[0]]));

function spans(reqs: OfficialRequest[]): Span[] {
  const out: Span[] = [];
  for (const r of reqs.filter((x) => x.signal === "traces"))
    for (const rs of r.message.resourceSpans ?? []) for (const ss of rs.scopeSpans ?? []) for (const s of ss.spans ?? []) out.push({ kind: s.kind, attributes: attrs(s.attributes) });
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
let server: Bun.Subprocess<"ignore", "pipe", "inherit"> | undefined;
let cert: SelfSignedCert | undefined;
let port = 0;

const targets = async (): Promise<TlsTarget[]> => ((await (await fetch(`${agent!.url}/status/ebpf`)).json()) as { tls?: TlsTarget[] }).tls ?? [];

describe.skipIf(!isRoot || missing.length > 0)(`statically linked OpenSSL${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  beforeAll(async () => {
    cert = makeSelfSignedCert();
    rx = await startOfficialReceiver();
    const config = QUIET_CONFIG.replace("  ebpf:\n    enabled: false\n", "  ebpf:\n    enabled: true\n    network:\n      enabled: true\n      http: true\n      tls: true\n      max_spans_per_second: 2000\n");
    agent = await spawnAgent({ config: `${config}queues:\n  traces:\n    batch_timeout: 50ms\n`, env: { OTLP_ENDPOINT: rx.endpoint }, timeoutMs: 30_000 });
    await until("ebpf/tls attached", async () => ((await (await fetch(`${agent!.url}/status/ebpf`)).json()) as { tls?: unknown }).tls);
    server = Bun.spawn([NODE!, SERVER, cert.certPath, `${cert.dir}/key.pem`], { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
    const reader = server.stdout.getReader();
    let text = "";
    while (!text.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) throw new Error("node https server exited before printing its port");
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

  test("node is probed by its own SSL_* symbols and its HTTPS requests become SERVER spans with url.scheme https", async () => {
    const serverPid = server!.pid;
    const target = await until("node's executable probed", async () => (await targets()).find((t) => t.pids.includes(serverPid) && t.state === "attached"));
    expect(target).toMatchObject({ kind: "static", path: realpathSync(NODE!) });
    expect(target.functions).toEqual(expect.arrayContaining(["SSL_read", "SSL_write"]));
    // Each attempt asks for paths of its own: the span budget is shared with the host's other traffic.
    let got: Span[] | undefined;
    for (let i = 0; i < ATTEMPTS && !got; i++) {
      const base = `https://127.0.0.1:${port}`;
      const curl = Bun.spawn(["curl", "-sk", "--http1.1", "-o", "/dev/null", "-o", "/dev/null", `${base}/hello-${i}`, `${base}/missing-${i}`], { stdout: "ignore", stderr: "pipe" });
      expect(await curl.exited).toBe(0);
      const mine = (all: OfficialRequest[]) =>
        spans(all).filter((s) => s.attributes["process.pid"] === serverPid && s.kind === "SPAN_KIND_SERVER" && String(s.attributes["url.path"]).endsWith(`-${i}`));
      got = await rx!.waitFor((all) => {
        void fetch(`${agent!.url}/admin/flush`, { method: "POST" }).catch(() => {});
        return mine(all).length >= 2;
      }, ATTEMPT_WAIT_MS).then((all) => mine(all), () => undefined);
    }
    expect(got).toBeDefined();
    await Bun.sleep(500);
    const summary = got!.map((s) => [s.attributes["http.request.method"], s.attributes["url.scheme"], s.attributes["http.response.status_code"], s.attributes["server.port"]]);
    expect(summary).toEqual([
      ["GET", "https", 200, port],
      ["GET", "https", 404, port],
    ]);
  });
});
