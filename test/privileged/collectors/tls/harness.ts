/**
 * Shared by the privileged TLS tests: dist/svc-agent with ebpf/tls exporting to the official OTLP receiver, the
 * spans it decodes, the `tls` list of /status/ebpf, a server whose first stdout line is its port, and the
 * constants of the per-attempt retries (the span budget is shared with every exchange on a shared host).
 */
import { QUIET_CONFIG, spawnAgent, type AgentProcess } from "../../../helpers";
import { waitUntil } from "../../../helpers/wait";
import { copyFileSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { bpftool } from "../../ebpf/helpers";
import { closedLoopbackPort } from "../../../helpers/ports";
import { makeSelfSignedCert } from "../../../helpers/self-signed-cert";
export { startPortServer } from "../../../helpers/ports";
import { startOfficialReceiver, type OfficialReceiver, type OfficialRequest } from "../../../helpers/official-receiver";

export const ATTEMPTS = 3;
export const ATTEMPT_WAIT_MS = 10_000;
/**
 * curl's local ports per attempt: [base + i * n, base + (i + 1) * n), the pid keeping parallel runs apart, all
 * below Linux's default ephemeral range (32768-60999), where the machine's own connections would take them (curl
 * exits with 7 when it can bind none of its ports).
 */
export const ATTEMPT_PORTS = 20;
export const ATTEMPT_PORT_BASE = 20_000 + (process.pid % 200) * ATTEMPTS * ATTEMPT_PORTS;

export interface TlsTarget {
  path: string;
  kind: string;
  state: string;
  reason?: string;
  functions: string[];
  processes: number;
  pids: number[];
  detach_at?: string;
}

/** The ids of the kernel links (bpftool link list) that run the agent's TLS uprobe programs (ssl_*), sorted. */
export async function probeLinks(t: TlsAgent): Promise<number[]> {
  const view = (await (await fetch(`${t.agent.url}/status/ebpf`)).json()) as { programs: Array<{ name: string; id: number }> };
  const ids = new Set(view.programs.filter((p) => p.name.startsWith("ssl_")).map((p) => p.id));
  return bpftool("link")
    .filter((l) => l.prog_id !== undefined && ids.has(l.prog_id))
    .map((l) => l.id)
    .sort((a, b) => a - b);
}

/** A private copy of the system's libssl.so.3 (its own inode: only the processes started on it map it). */
export interface LibsslCopy {
  /** The copy's path. */
  path: string;
  /** Starts a python3 that maps the copy (LD_LIBRARY_PATH, `import ssl`) until stopped. */
  hold(): { pid: number; stop(): Promise<void> };
  /** Removes the copy. */
  remove(): void;
}

export function libsslCopy(): LibsslCopy {
  const dir = mkdtempSync(join(tmpdir(), "svc-libssl-"));
  const path = join(dir, "libssl.so.3");
  copyFileSync(realpathSync("/usr/lib/x86_64-linux-gnu/libssl.so.3"), path);
  return {
    path,
    hold() {
      const p = Bun.spawn(["/usr/bin/python3", "-c", "import ssl, sys; sys.stdin.read()"], { stdin: "pipe", env: { ...process.env, LD_LIBRARY_PATH: dir } });
      return {
        pid: p.pid,
        async stop() {
          p.stdin.end();
          await p.exited;
        },
      };
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

export interface Span {
  name: string;
  kind: string;
  attributes: Record<string, unknown>;
  /** Hex. */
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
}

/** Attributes by key; int values (strings in MessageToDict's JSON) as numbers. */
const attrs = (list: Array<{ key: string; value: Record<string, unknown> }> | undefined): Record<string, unknown> =>
  Object.fromEntries((list ?? []).map((a) => [a.key, "intValue" in a.value ? Number(a.value.intValue) : Object.values(a.value)[0]]));

/** MessageToDict's base64 bytes as hex. */
const hex = (b64: string | undefined): string | undefined => (b64 === undefined ? undefined : Buffer.from(b64, "base64").toString("hex"));

/** Every span of the trace requests received. */
export function spans(reqs: OfficialRequest[]): Span[] {
  const out: Span[] = [];
  for (const r of reqs.filter((x) => x.signal === "traces"))
    for (const rs of r.message.resourceSpans ?? [])
      for (const ss of rs.scopeSpans ?? [])
        for (const s of ss.spans ?? [])
          out.push({ name: s.name, kind: s.kind, attributes: attrs(s.attributes), traceId: hex(s.traceId)!, spanId: hex(s.spanId)!, parentSpanId: hex(s.parentSpanId) });
  return out;
}

export interface Histogram {
  count: number;
  attributes: Record<string, unknown>;
}

/** Data points of `metric` (histograms) in the metric requests received. */
export function histogram(reqs: OfficialRequest[], metric: string): Histogram[] {
  const out: Histogram[] = [];
  for (const r of reqs.filter((x) => x.signal === "metrics"))
    for (const rm of r.message.resourceMetrics ?? [])
      for (const sm of rm.scopeMetrics ?? [])
        for (const m of sm.metrics ?? [])
          if (m.name === metric)
            for (const p of m.histogram?.dataPoints ?? [])
              out.push({
                count: Number(p.count ?? 0),
                attributes: Object.fromEntries((p.attributes ?? []).map((a: { key: string; value: Record<string, unknown> }) => [a.key, "intValue" in a.value ? Number(a.value.intValue) : Object.values(a.value)[0]])),
              });
  return out;
}

/** Polls `fn` every 100 ms until it gives a value (an object, or true), for at most `timeoutMs`. */
export async function until<T extends object | true>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  return waitUntil(fn, { what, timeoutMs, intervalMs: 100 });
}

export interface TlsAgent {
  rx: OfficialReceiver;
  agent: AgentProcess;
  /** The `tls` list of /status/ebpf. */
  targets(): Promise<TlsTarget[]>;
  stop(): Promise<void>;
}

/**
 * The official receiver and the agent (network, HTTP and TLS on; traces batched every 50 ms), once ebpf/tls is
 * attached; `network`: more lines under agent.ebpf.network (indented by six spaces), then any under agent.ebpf
 * (four spaces).
 */
export async function startTlsAgent(network = "", options: { tls?: boolean } = {}): Promise<TlsAgent> {
  const tls = options.tls ?? true;
  const rx = await startOfficialReceiver();
  const config = QUIET_CONFIG.replace("otlp:\n", "otlp:\n  compression: gzip\n").replace(
    "  ebpf:\n    enabled: false\n",
    `  ebpf:\n    enabled: true\n    network:\n      enabled: true\n      http: true\n      tls: ${tls}\n      max_spans_per_second: 2000\n${network}`,
  );
  const agent = await spawnAgent({ config: `${config}queues:\n  traces:\n    batch_timeout: 50ms\n`, env: { OTLP_ENDPOINT: rx.endpoint }, timeoutMs: 30_000 });
  const view = async () => (await (await fetch(`${agent.url}/status/ebpf`)).json()) as { tls?: TlsTarget[] };
  if (tls) await until("ebpf/tls attached", async () => (await view()).tls);
  return {
    rx,
    agent,
    targets: async () => (await view()).tls ?? [],
    async stop() {
      await agent.stop();
      await rx.stop();
    },
  };
}


/**
 * Runs attempts until one's spans all arrive (at most ATTEMPTS): `start(i, lo)` sends attempt i's requests (from
 * local ports [lo, lo + ATTEMPT_PORTS) where it can choose) and says when they have arrived. Resolves with the
 * attempt that succeeded, or undefined; each one missed is logged with the agent's drop counters.
 */
export async function firstAttempt<T>(t: TlsAgent, start: (i: number, lo: number) => Promise<{ arrivedWhen: (all: OfficialRequest[]) => boolean; value: T }>): Promise<{ lo: number; value: T } | undefined> {
  for (let i = 0; i < ATTEMPTS; i++) {
    const lo = ATTEMPT_PORT_BASE + i * ATTEMPT_PORTS;
    const { arrivedWhen, value } = await start(i, lo);
    const ok = await t.rx
      .waitFor((all) => {
        void fetch(`${t.agent.url}/admin/flush`, { method: "POST" }).catch(() => {});
        return arrivedWhen(all);
      }, ATTEMPT_WAIT_MS)
      .then(
        () => true,
        () => false,
      );
    if (ok) return { lo, value };
    const metrics = (await (await fetch(`${t.agent.url}/metrics`)).text()).split("\n").filter((l) => /tls_events|spans_dropped_total/.test(l) && !l.startsWith("#"));
    console.error(`attempt ${i + 1}: spans not all exported; agent metrics:\n${metrics.join("\n")}`);
  }
  return undefined;
}

/**
 * Flushes the agent until `arrived` holds on what the receiver decoded (at most `timeoutMs`), then once more, and
 * gives that last flush's exports time to arrive: what is read after it is all the agent had to send.
 */
export async function flushUntil(t: TlsAgent, arrived: () => boolean, timeoutMs = 20_000): Promise<void> {
  await t.rx.waitFor(() => {
    void fetch(`${t.agent.url}/admin/flush`, { method: "POST" }).catch(() => {});
    return arrived();
  }, timeoutMs);
  await fetch(`${t.agent.url}/admin/flush`, { method: "POST" });
  await Bun.sleep(500);
}

/** Whether a port is in attempt `lo`'s range. */
export const inRange = (p: unknown, lo: number): boolean => typeof p === "number" && p >= lo && p < lo + ATTEMPT_PORTS;

/** The https spans of a process, of one kind. */
export const httpsOf = (all: Span[], pid: number, kind: "SPAN_KIND_SERVER" | "SPAN_KIND_CLIENT"): Span[] =>
  all.filter((s) => s.attributes["url.scheme"] === "https" && s.attributes["process.pid"] === pid && s.kind === kind);

/** nghttpd (nghttp2-server, on libssl.so.3) serving `files` over h2 with a throw-away certificate. */
export interface NghttpdServer {
  port: number;
  pid: number;
  /** Stops it and removes its certificate and files. */
  stop(): Promise<void>;
}

/** Starts nghttpd on a free loopback port with `files` (path under the root -> content); resolves once it answers curl. */
export async function startNghttpd(files: Record<string, string>): Promise<NghttpdServer> {
  const cert = makeSelfSignedCert();
  const docroot = join(cert.dir, "www");
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(dirname(join(docroot, path)), { recursive: true });
    writeFileSync(join(docroot, path), content);
  }
  const port = closedLoopbackPort();
  const server = Bun.spawn(["nghttpd", "-a", "127.0.0.1", "-d", docroot, String(port), join(cert.dir, "key.pem"), cert.certPath], { stdin: "ignore", stdout: "ignore", stderr: "inherit" });
  const stop = async () => {
    server.kill();
    await server.exited;
    rmSync(cert.dir, { recursive: true, force: true });
  };
  try {
    await waitUntil(() => Bun.spawnSync(["curl", "-sk", "--http2", "-o", "/dev/null", `https://127.0.0.1:${port}/`]).exitCode === 0, { timeoutMs: 15_000, intervalMs: 100, what: "nghttpd listening" });
  } catch (e) {
    await stop();
    throw e;
  }
  return { port, pid: server.pid, stop };
}
