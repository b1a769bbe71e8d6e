/**
 * Privileged e2e: dist/svc-agent exporting to a receiver on this host does not trace the receiver's side of its own
 * exports (each would be a span exported in the next batch, which makes another: a loop with no other traffic).
 * The official OTLP receiver (Python, grpcio and http.server) receives the agent's exports over OTLP/HTTP, then
 * over OTLP/gRPC (h2c); an HTTPS server (Python's http.server in ssl, OpenSSL) receives its metrics over
 * OTLP/HTTP with TLS. With HTTP capture on and no traffic but one curl request to each server: after several
 * exports, no span and no RED count of the receiving side belongs to the agent's connections, while curl's
 * request is traced exactly once on each side and counted once in http.server.request.duration.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { rmSync } from "node:fs";
import { resolve } from "node:path";
import { QUIET_CONFIG, spawnAgent, type AgentProcess } from "../../../helpers";
import { missingOfficialTools, startOfficialReceiver, type OfficialReceiver, type OfficialRequest } from "../../../helpers/official-receiver";
import { closedLoopbackPort } from "../../../helpers/ports";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";
import { ATTEMPT_PORTS, ATTEMPT_PORT_BASE, ATTEMPTS, inRange, spans, histogram, startPortServer, until, type Span } from "../tls/harness";

setDefaultTimeout(120_000);

const isRoot = process.getuid?.() === 0;
const missing = [...missingOfficialTools(), ...(Bun.which("curl") ? [] : ["curl"]), ...(Bun.which("openssl") ? [] : ["openssl"])];
const HTTPS_SERVER = resolve(import.meta.dir, "../../../fixtures/https-server.py");
/** How long the agent keeps exporting (metrics every second, traces every 50 ms) after the curl request. */
const OBSERVE_MS = 5_000;

/** The agent, network + HTTP (+ TLS) on, metrics every second; `otlp` lines replace the otlp section's endpoint. */
async function startAgent(otlp: string, env: Record<string, string> = {}): Promise<AgentProcess> {
  const config = QUIET_CONFIG.replace("  endpoint: ${OTLP_ENDPOINT:-127.0.0.1:4317}\n", otlp).replace(
    "  ebpf:\n    enabled: false\n",
    "  ebpf:\n    enabled: true\n    network:\n      enabled: true\n      http: true\n      tls: true\n      metrics_interval: 1s\n      max_spans_per_second: 2000\n",
  );
  return spawnAgent({ config: `${config}queues:\n  traces:\n    batch_timeout: 50ms\n  metrics:\n    batch_timeout: 50ms\n`, env, timeoutMs: 30_000 });
}

/**
 * One curl request (from a port in an attempt's range, retried while the machine-wide span budget refuses it) to
 * `url`; waits until its SERVER span (by the server's port) arrived, then OBSERVE_MS more with flushes.
 * Returns the attempt's port range start and curl's pid.
 */
async function curlOnceThenObserve(agent: AgentProcess, rx: OfficialReceiver, url: string, serverPort: number, curlArgs: string[] = []): Promise<{ lo: number; curlPid: number }> {
  const flush = () => void fetch(`${agent.url}/admin/flush`, { method: "POST" }).catch(() => {});
  for (let i = 0; i < ATTEMPTS; i++) {
    const lo = ATTEMPT_PORT_BASE + i * ATTEMPT_PORTS;
    const curl = Bun.spawn(["curl", "-s", ...curlArgs, "--local-port", `${lo}-${lo + ATTEMPT_PORTS - 1}`, "-o", "/dev/null", url], { stdout: "ignore", stderr: "inherit" });
    expect(await curl.exited).toBe(0);
    const arrived = await rx
      .waitFor((all) => {
        flush();
        return spans(all).some((s) => s.kind === "SPAN_KIND_SERVER" && s.attributes["server.port"] === serverPort && inRange(s.attributes["client.port"], lo));
      }, 10_000)
      .then(
        () => true,
        () => false,
      );
    if (!arrived) continue;
    const end = performance.now() + OBSERVE_MS;
    while (performance.now() < end) {
      flush();
      await Bun.sleep(250);
    }
    return { lo, curlPid: curl.pid };
  }
  throw new Error(`curl's request to ${url} was not traced in ${ATTEMPTS} attempts`);
}

/** SERVER spans received by the server at `port`, as `client.port method path`. */
const serverSpans = (all: Span[], port: number) =>
  all.filter((s) => s.kind === "SPAN_KIND_SERVER" && s.attributes["server.port"] === port).map((s) => `${s.attributes["client.port"]} ${s.attributes["http.request.method"] ?? s.name} ${s.attributes["url.path"] ?? ""}`);

describe.skipIf(!isRoot || missing.length > 0)(`the agent's own exports to a local receiver are not traced${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  let rx: OfficialReceiver;
  let cert: SelfSignedCert;
  let https: Bun.Subprocess<"ignore", "pipe", "inherit"> | undefined;
  let httpsPort = 0;

  beforeAll(async () => {
    rx = await startOfficialReceiver({ http: true });
    cert = makeSelfSignedCert();
    ({ proc: https, port: httpsPort } = await startPortServer(["/usr/bin/python3", HTTPS_SERVER, cert.certPath, `${cert.dir}/key.pem`]));
  });

  afterAll(async () => {
    https?.kill();
    await https?.exited;
    await rx?.stop();
    if (cert) rmSync(cert.dir, { recursive: true, force: true });
  });

  const httpPort = () => Number(new URL(rx.httpEndpoint!).port);

  test("OTLP/HTTP: the receiver's spans and RED counts are curl's request only", async () => {
    const agent = await startAgent(`  endpoint: ${rx.httpEndpoint}\n  protocol: http/protobuf\n`);
    try {
      const before = rx.requests().length;
      const { lo, curlPid } = await curlOnceThenObserve(agent, rx, `${rx.httpEndpoint}/nothing`, httpPort());
      const reqs = rx.requests().slice(before);
      expect(reqs.filter((r) => r.signal === "metrics").length).toBeGreaterThanOrEqual(3);
      const all = spans(reqs);
      // Exactly curl's request on the receiver's side, and once on curl's.
      expect(serverSpans(all, httpPort()).filter((s) => !inRange(Number(s.split(" ")[0]), lo))).toEqual([]);
      expect(serverSpans(all, httpPort()).length).toBe(1);
      expect(all.filter((s) => s.kind === "SPAN_KIND_CLIENT" && s.attributes["process.pid"] === curlPid && !s.name.startsWith("CONNECT")).length).toBe(1);
      // RED metrics (counted in the kernel, no budget): the receiver's server side counts curl's request, not the exports.
      const red = histogram(rx.requests(), "http.server.request.duration").filter((p) => p.attributes["server.port"] === httpPort());
      expect(red.reduce((n, p) => n + p.count, 0)).toBe(1);
    } finally {
      await agent.stop();
    }
  });

  test("OTLP/gRPC (h2c): no RPC span of the receiver for the agent's exports", async () => {
    // The agent's channel must open once its programs run (HTTP/2 is recognised from a connection's first bytes):
    // the agent starts exporting to a closed port, the receiver comes up there afterwards.
    const port = closedLoopbackPort();
    const agent = await startAgent(`  endpoint: 127.0.0.1:${port}\n  protocol: grpc\n`);
    let grpcRx: OfficialReceiver | undefined;
    try {
      await until("ebpf/network attached", async () => (agent.records.some((r) => r.msg === "eBPF program set attached" && r.set === "network") ? true : undefined));
      grpcRx = await startOfficialReceiver({ http: true, port });
      const rx2 = grpcRx;
      const rx2HttpPort = Number(new URL(rx2.httpEndpoint!).port);
      const { lo } = await curlOnceThenObserve(agent, rx2, `${rx2.httpEndpoint}/nothing`, rx2HttpPort);
      const reqs = rx2.requests();
      expect(reqs.filter((r) => r.signal === "metrics" && r.transport === "grpc").length).toBeGreaterThanOrEqual(3);
      const all = spans(reqs);
      // Neither side of the agent's channel: its own calls (self) nor the receiver's (the peer of its connection).
      expect(all.filter((s) => s.attributes["server.port"] === port)).toEqual([]);
      expect(serverSpans(all, rx2HttpPort).map((s) => inRange(Number(s.split(" ")[0]), lo))).toEqual([true]);
      expect(histogram(reqs, "rpc.server.duration").filter((p) => p.attributes["server.port"] === port)).toEqual([]);
    } finally {
      await agent.stop();
      await grpcRx?.stop();
    }
  });

  test("OTLP/HTTP over TLS (OpenSSL server): no https span of the agent's metric exports, curl's request once", async () => {
    const agent = await startAgent(
      `  endpoint: ${rx.endpoint}\n  protocol: grpc\n  signals:\n    metrics:\n      protocol: http/protobuf\n      endpoint: https://127.0.0.1:${httpsPort}/v1/metrics\n`,
      // Bun's fetch trusts the test's self-signed certificate through NODE_EXTRA_CA_CERTS (otlp.tls would also apply to the receiver's plaintext gRPC).
      { NODE_EXTRA_CA_CERTS: cert.certPath },
    );
    try {
      const before = rx.requests().length;
      // ebpf/tls attaches to the server's libssl in the background: curl is retried until its span arrives.
      const { lo } = await curlOnceThenObserve(agent, rx, `https://127.0.0.1:${httpsPort}/hello`, httpsPort, ["-k", "--http1.1"]);
      const exported = (await (await fetch(`${agent.url}/metrics`)).text()).match(/^svc_metrics_exported_total(?:\{[^}]*\})? (\d+)/m);
      const all = spans(rx.requests().slice(before));
      const server = all.filter((s) => s.kind === "SPAN_KIND_SERVER" && s.attributes["process.pid"] === https!.pid);
      expect(server.filter((s) => s.attributes["url.path"] === "/v1/metrics")).toEqual([]);
      expect(server.map((s) => `${s.attributes["url.scheme"]} ${s.attributes["url.path"]} ${inRange(s.attributes["client.port"], lo)}`)).toEqual(["https /hello true"]);
      // The metric exports did reach the HTTPS server (its 201 is a success).
      expect(Number(exported?.[1] ?? 0)).toBeGreaterThan(0);
    } finally {
      await agent.stop();
    }
  });
});
