/**
 * Shared by the privileged tests of one TLS library each (BoringSSL, OpenSSL 1.1) and by the gRPC-over-TLS test: an
 * in-process agent with the `tls` set (budgets above what the host's other traffic spends), the `tls` list of its
 * /status/ebpf, and `libraryCase`, which checks a library from both ends. A server on the library answers curl
 * (libssl.so.3) three requests on one keep-alive connection (/hello 200, /missing 404, /again 200); a client on the
 * library asks Python's https server (libssl.so.3) for `clientPath` once. Each side must give exactly its spans
 * (decoded by protoc) with url.scheme https and the connection's addresses, and its counts in the HTTP RED metrics.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { resolve } from "node:path";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";
import { firstLine, waitUntil } from "../../../helpers/wait";
import { decodeSpansWithProtoc, startTracingAgent, until, type DecodedSpan, type TracingAgent } from "../network/harness";
import type { TlsTarget } from "./harness";

const PY_SERVER = resolve(import.meta.dir, "../../../fixtures/https-server.py");

/** The in-process agent with network, HTTP and TLS on, once ebpf/tls is ok. */
export async function startTlsTracingAgent(extra = ""): Promise<TracingAgent> {
  const t = await startTracingAgent(`    network:
      enabled: true
      tls: true
      max_spans_per_second: 1000000
      metrics_interval: 1s${extra}`);
  await until(() => t.agent.agent.status.component("ebpf/tls")?.state === "ok", "ebpf/tls ok", 30_000);
  return t;
}

/** Waits until `pid` maps an attached target whose path `matches`; resolves with it. */
export async function attachedTarget(t: TracingAgent, pid: number, matches: (path: string) => boolean): Promise<TlsTarget> {
  const targets = async () => (((await (await t.agent.request("/status/ebpf")).json()) as { tls?: TlsTarget[] }).tls ?? []);
  return waitUntil(async () => (await targets()).find((x) => x.state === "attached" && x.pids.includes(pid) && matches(x.path)), { what: `a TLS target attached for ${pid}`, timeoutMs: 30_000, intervalMs: 100 });
}

/** A process of the library under test. */
export interface Started {
  proc: Bun.Subprocess<"ignore" | "pipe", "pipe", "inherit" | "ignore">;
  /** Resolves once its request was answered (clients). */
  done?: Promise<void>;
}

export interface LibraryCase {
  name: string;
  /** What is missing for it to run here (empty: nothing). */
  missing: string[];
  /** Whether a probed file (its path) is the library's. */
  target: (path: string) => boolean;
  /** Starts the library's https server (its first stdout line is its port). */
  server(cert: SelfSignedCert): Started;
  /** Starts the library's client asking `https://127.0.0.1:{port}{clientPath}`; `probed` resolves once its library is attached. */
  client(port: number, probed: (pid: number) => Promise<void>): Promise<Started>;
  clientPath: string;
  /** Checks the library's target as /status/ebpf lists it. */
  checkTarget(target: TlsTarget): void;
}

export function libraryCase(c: LibraryCase): void {
  const isRoot = process.getuid?.() === 0;
  const missing = [...c.missing, ...["curl", "openssl", "protoc"].filter((b) => !Bun.which(b))];
  describe.skipIf(!isRoot || missing.length > 0)(`${c.name}${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
    let t: TracingAgent;
    let cert: SelfSignedCert;
    const children: Started["proc"][] = [];
    let serverPid = 0;
    let port = 0;
    let pyPid = 0;
    let pyPort = 0;
    let curlPid = 0;
    let clientPid = 0;
    let target: TlsTarget;
    let spans: DecodedSpan[] = [];

    beforeAll(async () => {
      cert = makeSelfSignedCert();
      t = await startTlsTracingAgent();
      const server = c.server(cert).proc;
      children.push(server);
      serverPid = server.pid;
      port = Number(await firstLine(server.stdout));
      const py = Bun.spawn(["/usr/bin/python3", PY_SERVER, cert.certPath, `${cert.dir}/key.pem`], { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
      children.push(py);
      pyPid = py.pid;
      pyPort = Number(await firstLine(py.stdout));
      target = await attachedTarget(t, serverPid, c.target);
      await attachedTarget(t, pyPid, (p) => /\/libssl\.so\.3$/.test(p));

      const base = `https://127.0.0.1:${port}`;
      const curl = Bun.spawn(["curl", "-sk", "--http1.1", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", `${base}/hello`, `${base}/missing`, `${base}/again`], { stdout: "ignore", stderr: "inherit" });
      curlPid = curl.pid;
      expect(await curl.exited).toBe(0);
      const client = await c.client(pyPort, async (pid) => void (await attachedTarget(t, pid, c.target)));
      children.push(client.proc);
      clientPid = client.proc.pid;
      await client.done;
    }, 90_000);

    afterAll(async () => {
      for (const p of children) p.kill();
      await Promise.all(children.map((p) => p.exited));
      await t?.stop();
      if (cert) rmSync(cert.dir, { recursive: true, force: true });
    });

    test("the library is probed", () => c.checkTarget(target));

    test("its server's and client's requests are exact spans on both sides, with url.scheme https and addresses", async () => {
      const of = (pid: number, kind: string) => spans.filter((s) => s.attributes["process.pid"] === pid && s.kind === kind && s.attributes["url.scheme"] === "https");
      const row = (s: DecodedSpan) => `${s.attributes["http.request.method"]} ${s.attributes["url.path"]} ${s.attributes["http.response.status_code"]} ${s.attributes["server.port"]}`;
      const byStart = (list: DecodedSpan[]) => [...list].sort((a, b) => (a.startNs < b.startNs ? -1 : 1));
      const arrived = () => of(serverPid, "SPAN_KIND_SERVER").length >= 3 && of(curlPid, "SPAN_KIND_CLIENT").length >= 3 && of(clientPid, "SPAN_KIND_CLIENT").length >= 1 && of(pyPid, "SPAN_KIND_SERVER").length >= 1;
      await until(() => ((spans = t.collected.spans), arrived()), "server and client spans", 30_000).catch((e: Error) => {
        const mine = t.collected.spans.filter((s) => [serverPid, curlPid, clientPid, pyPid].includes(Number(s.attributes["process.pid"])));
        throw new Error(`${e.message}; seen: ${mine.map((s) => `${s.attributes["process.pid"]} ${s.kind} ${row(s)}`).join("; ")}`);
      });
      await Bun.sleep(300);
      spans = decodeSpansWithProtoc(t.collected.traceBodies);
      const curlRows = [`GET /hello 200 ${port}`, `GET /missing 404 ${port}`, `GET /again 200 ${port}`];
      expect(byStart(of(serverPid, "SPAN_KIND_SERVER")).map(row)).toEqual(curlRows);
      expect(byStart(of(curlPid, "SPAN_KIND_CLIENT")).map(row)).toEqual(curlRows);
      expect(of(clientPid, "SPAN_KIND_CLIENT").map(row)).toEqual([`GET ${c.clientPath} 200 ${pyPort}`]);
      expect(of(pyPid, "SPAN_KIND_SERVER").map(row)).toEqual([`GET ${c.clientPath} 200 ${pyPort}`]);
      for (const s of of(serverPid, "SPAN_KIND_SERVER")) expect(s.attributes).toMatchObject({ "client.address": "127.0.0.1", "network.local.port": port });
      expect(of(clientPid, "SPAN_KIND_CLIENT")[0]!.attributes).toMatchObject({ "network.peer.address": "127.0.0.1", "network.peer.port": pyPort });
    });

    test("the HTTP RED metrics count each request once, with url.scheme https", async () => {
      const count = (metric: string, p: number, status: number) => t.collected.total(metric, (a) => a["server.port"] === p && a["url.scheme"] === "https" && a["http.response.status_code"] === status && a["http.request.method"] === "GET");
      const all = (metric: string, p: number) => t.collected.total(metric, (a) => a["server.port"] === p);
      await until(() => all("http.server.request.duration", port) >= 3 && all("http.client.request.duration", port) >= 3 && all("http.client.request.duration", pyPort) >= 1, "RED points", 20_000);
      await Bun.sleep(1500);
      for (const metric of ["http.server.request.duration", "http.client.request.duration"]) {
        expect([count(metric, port, 200), count(metric, port, 404), all(metric, port)]).toEqual([2, 1, 3]);
        expect([count(metric, pyPort, 200), all(metric, pyPort)]).toEqual([1, 1]);
      }
    });
  });
}
