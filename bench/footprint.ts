/**
 * Footprint of the compiled agent (dist/svc-agent) with every subsystem enabled: eBPF (network with HTTP
 * capture, syscalls), CPU profiling, log tailing, discovery (Kubernetes detection, Docker, cloud: absent
 * daemons just report so), self-tracing; exporting to `svc-agent receive` on loopback.
 * Figures:
 *   - start to GET /healthz 200, and to GET /ready 200 with eBPF loaded (median of --starts runs; the
 *     reference is a bare compiled Bun binary answering /healthz, built in the same run);
 *   - idle RSS after --idle seconds (reference: the bare Bun binary's RSS);
 *   - peak RSS, eBPF events/s, spans/s exported and agent CPU per 1,000 events under a connect storm
 *     (bench/connect-storm.c: loopback TCP connections opened and reset at --conns per second; each gives
 *     connection events through the ring buffer and a CONNECT span, capped at max_spans_per_second 20,000);
 *   - binary size (reference: the bare Bun binary).
 * Events and spans are the agent's own counters (svc_ebpf_ringbuf_events_total, svc_spans_exported_total)
 * read from /metrics before and after the storm; RSS and CPU come from /proc/<pid>.
 * Then a breakdown: fresh starts adding one subsystem at a time (start to /healthz, RSS anonymous/file-backed
 * after --settle seconds), to see where start time and memory go.
 * Two more sections measure what issue-level targets name, each next to the bare Bun binary of the same run:
 *   - `defaults`: the embedded default configuration (src/config/default.yaml: network tracing on; only the listen
 *     address and the OTLP endpoint changed to free loopback ports), started --starts times: start to /healthz
 *     and to /ready, then RSS and the cgroup's memory figure --defaults-idle seconds (60) after start, the agent
 *     alone in a memory cgroup of its own (v2 memory.current, or v1 memory.usage_in_bytes), with the bare binary
 *     started beside it in a cgroup of its own for the same time as the reference; the RSS broken down from
 *     /proc/<pid>/smaps (bench/lib/proc.ts memoryBreakdown): anonymous, the executable's pages (Bun's code, the
 *     embedded bundle), shared libraries, BPF map mappings, each next to the bare binary's; then RSS and the
 *     cgroup's figure again --defaults-recheck seconds (120; 0: not) after start, so that memory released after
 *     start-up and faulted back in later shows;
 *   - `limiter`: the same configuration with the span cap raised (max_spans_per_second 1,000,000) and
 *     agent.memory_limit.limit --limit MiB (soft limit auto, 80% of it), under an HTTP storm (wrk, keep-alive,
 *     against a Bun.serve server) at the highest rate wrk reaches here for --load seconds, then the connect storm:
 *     RSS sampled every RSS_SAMPLE_MS throughout, its peak next to the hard limit, with the requests/s reached and
 *     the spans exported and dropped (memory_limit) under each.
 * Needs root (eBPF), gcc, wrk and `bun run build`.
 * Usage: bun bench/footprint.ts [--sections full,defaults,limiter] [--idle S] [--load S] [--conns N] [--starts N]
 *        [--settle S] [--defaults-idle S] [--defaults-recheck S] [--limit MiB]
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { BINARY, startReceiver } from "./lib/agent";
import { report, type BenchRow } from "./lib/report";
import { median } from "./lib/stats";
import { cpuSeconds, memoryBreakdown } from "./lib/proc";
import { argNumber, argText } from "./lib/args";

const IDLE_S = argNumber("idle", 10);
const LOAD_S = argNumber("load", 20);
const CONNS_PER_S = argNumber("conns", 25_000);
const STARTS = argNumber("starts", 3);
const TARGET_IDLE_RSS_MB = 80;
const TARGET_LOAD_RSS_MB = 160;
const TARGET_HEALTHZ_MS = 150;
const TARGET_READY_MS = 1500;
const TARGET_EVENTS_PER_S = 100_000;
const TARGET_SPANS_PER_S = 20_000;
const READY_TIMEOUT_MS = 30_000;
const POLL_MS = 1;
const BREAKDOWN_SETTLE_S = argNumber("settle", 3);
const SECTIONS = new Set(argText("sections", "full,defaults,limiter").split(","));
const DEFAULTS_IDLE_S = argNumber("defaults-idle", 60);
/** 0 (or anything up to --defaults-idle): no second reading. */
const DEFAULTS_RECHECK_S = argNumber("defaults-recheck", 120);
const LIMIT_MIB = argNumber("limit", 192);
const TARGET_DEFAULTS_RSS_MB = 75;
const TARGET_DEFAULTS_READY_MS = 1000;
const HTTP_STORM_THREADS = 2;
const HTTP_STORM_CONNECTIONS = 128;
const RSS_SAMPLE_MS = 100;
const MB = 1024 * 1024;

const dir = mkdtempSync(join(tmpdir(), "svc-bench-footprint-"));

function freePort(): number {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) * 1024 : 0;
}

/** Milliseconds from `t0` until GET url answers 200, or `accept` says yes (polled every POLL_MS). */
async function until200(url: string, t0: number, accept?: (r: Response) => Promise<boolean>, timeoutMs = READY_TIMEOUT_MS): Promise<number> {
  for (;;) {
    const ok = await fetch(url).then(
      async (r) => {
        if (r.status !== 200 && accept) return accept(r);
        await r.body?.cancel();
        return r.status === 200;
      },
      () => false,
    );
    if (ok) return performance.now() - t0;
    if (performance.now() - t0 > timeoutMs) {
      const why = await fetch(url).then((r) => r.text(), (e: Error) => e.message);
      throw new Error(`${url} not 200 after ${timeoutMs} ms: ${why}`);
    }
    await Bun.sleep(POLL_MS);
  }
}

function sumMetric(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split("\n")) if (line.startsWith(name) && (line[name.length] === " " || line[name.length] === "{")) sum += Number(line.slice(line.lastIndexOf(" ") + 1));
  return sum;
}

/** Docker discovery runs as auto (the default): without a Docker daemon it waits for the socket and /ready is not
 * held back by it; a discovery check failing on the socket would still count as ready-but-docker here. */
const DOCKER_SOCKET = "/var/run/docker.sock";
const DOCKER_PRESENT = existsSync(DOCKER_SOCKET);
async function readyButDocker(r: Response): Promise<boolean> {
  const body = (await r.json()) as { checks: Record<string, string> };
  return Object.entries(body.checks).every(([k, v]) => v === "ok" || (k === "discovery" && v.includes(DOCKER_SOCKET)));
}

/** Per-label-value sums of a counter's samples (e.g. svc_spans_dropped_total by reason). */
function byLabel(text: string, name: string, label: string): Map<string, number> {
  const out = new Map<string, number>();
  const re = new RegExp(`^${name}\\{[^}]*${label}="([^"]*)"[^}]*\\} (\\S+)$`, "gm");
  for (const m of text.matchAll(re)) out.set(m[1]!, (out.get(m[1]!) ?? 0) + Number(m[2]));
  return out;
}


/** Subsystems switched on, cumulatively, by the breakdown runs (the main runs switch every one on). */
const LAYERS = ["ebpf network+http", "ebpf syscalls", "profiling", "logs", "discovery", "self-tracing"] as const;
type Layer = (typeof LAYERS)[number];

function agentConfig(port: number, endpoint: string, on: ReadonlySet<Layer> = new Set(LAYERS)): string {
  writeFileSync(join(dir, "app.log"), "");
  const network = on.has("ebpf network+http");
  const syscalls = on.has("ebpf syscalls");
  const discovery = on.has("discovery");
  return `
self_telemetry:
  listen: 127.0.0.1:${port}
  tracing:
    enabled: ${on.has("self-tracing")}
    sample_rate: 0.01
otlp:
  endpoint: ${endpoint}
agent:
  ebpf:
    enabled: ${network || syscalls}
    network:
      enabled: ${network}
      http: ${network}
      max_spans_per_second: ${TARGET_SPANS_PER_S}
    syscalls:
      enabled: ${syscalls}
  profiling:
    enabled: ${on.has("profiling")}
  logs:
    enabled: ${on.has("logs")}
    include: ["${dir}/*.log"]
    checkpoint_file: ${dir}/checkpoint.json
  discovery:
    detect_kubernetes: ${discovery}
    docker:
      enabled: ${discovery ? "auto" : "false"}
    cloud:
      enabled: ${discovery}
`;
}

interface Started {
  proc: Bun.Subprocess;
  url: string;
  healthzMs: number;
  readyMs?: number;
}

async function startTimed(argv: string[], port: number, ready: boolean): Promise<Started> {
  const t0 = performance.now();
  const proc = Bun.spawn(argv, { stdout: "ignore", stderr: "ignore", env: { PATH: process.env.PATH ?? "" } });
  const url = `http://127.0.0.1:${port}`;
  const healthzMs = await until200(`${url}/healthz`, t0);
  const readyMs = ready ? await until200(`${url}/ready`, t0, DOCKER_PRESENT ? undefined : readyButDocker) : undefined;
  return { proc, url, healthzMs, readyMs };
}

async function stop(proc: Bun.Subprocess): Promise<void> {
  proc.kill("SIGTERM");
  await proc.exited;
}

// Reference: a bare compiled Bun binary answering /healthz.
const barePath = join(dir, "bare.ts");
writeFileSync(barePath, `Bun.serve({ hostname: "127.0.0.1", port: Number(process.argv[2]), fetch: () => Response.json({ status: "ok" }) });\n`);
const bareBin = join(dir, "bare");
const built = Bun.spawnSync([process.execPath, "build", "--compile", barePath, "--outfile", bareBin], { stderr: "pipe" });
if (built.exitCode !== 0) throw new Error(`bare binary build failed: ${built.stderr}`);
const stormBin = join(dir, "connect-storm");
const cc = Bun.spawnSync(["gcc", "-O2", "-pthread", "-o", stormBin, resolve(import.meta.dir, "connect-storm.c")], { stderr: "pipe" });
if (cc.exitCode !== 0) throw new Error(`connect-storm build failed: ${cc.stderr}`);

const receiver = await startReceiver();
const rows: BenchRow[] = [];
const notes: string[] = [];
try {
  const bareStarts: number[] = [];
  let bareRss = 0;
  for (let i = 0; i < STARTS; i++) {
    const port = freePort();
    const s = await startTimed([bareBin, String(port)], port, false);
    bareStarts.push(s.healthzMs);
    await Bun.sleep(500);
    bareRss = rssBytes(s.proc.pid!);
    await stop(s.proc);
  }
  if (SECTIONS.has("defaults")) await defaultsSection(bareStarts);
  if (SECTIONS.has("limiter")) await limiterSection();
  if (SECTIONS.has("full")) await fullSection(bareStarts, bareRss);
} finally {
  await receiver.stop();
  rmSync(dir, { recursive: true, force: true });
}
report({ bench: "footprint: dist/svc-agent (embedded defaults; memory limiter under storms; every subsystem enabled)", rows, notes });

async function fullSection(bareStarts: number[], bareRss: number): Promise<void> {

  const healthz: number[] = [];
  const ready: number[] = [];
  let agent: Started | undefined;
  for (let i = 0; i < STARTS; i++) {
    const port = freePort();
    const cfg = join(dir, `config-${i}.yaml`);
    writeFileSync(cfg, agentConfig(port, receiver.address));
    const s = await startTimed([BINARY, "--config", cfg], port, true);
    healthz.push(s.healthzMs);
    ready.push(s.readyMs!);
    if (i < STARTS - 1) await stop(s.proc);
    else agent = s;
  }
  const a = agent!;
  const ebpf = (await (await fetch(`${a.url}/status/ebpf`)).json()) as { enabled: boolean; programs: Array<{ attached: boolean }>; maps: unknown[] };
  const attached = ebpf.programs.filter((p) => p.attached).length;
  if (!ebpf.enabled || attached === 0) throw new Error(`eBPF not loaded in the agent: ${JSON.stringify(ebpf).slice(0, 300)}`);
  const status = (await (await fetch(`${a.url}/status`)).json()) as Record<string, unknown>;
  notes.push(`agent at /ready: ${attached} eBPF programs attached, ${ebpf.maps.length} maps; /ready checks ${JSON.stringify(((await (await fetch(`${a.url}/ready`)).json()) as { checks: unknown }).checks)}; discovery ${JSON.stringify(status.discovery)}`);

  await Bun.sleep(IDLE_S * 1000);
  const idleRss = rssBytes(a.proc.pid!);
  const idleMem = memoryBreakdown(a.proc.pid!);
  const idleBpfRss = idleMem.bpfMaps;

  const pid = a.proc.pid!;
  const m0 = await (await fetch(`${a.url}/metrics`)).text();
  const cpu0 = cpuSeconds(pid);
  const t0 = performance.now();
  const storm = Bun.spawn([stormBin, String(CONNS_PER_S), String(LOAD_S)], { stdout: "pipe" });
  let peakRss = 0;
  const sampler = setInterval(() => (peakRss = Math.max(peakRss, rssBytes(pid))), RSS_SAMPLE_MS);
  const stormOut = await new Response(storm.stdout).text();
  await storm.exited;
  clearInterval(sampler);
  peakRss = Math.max(peakRss, rssBytes(pid));
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuSeconds(pid) - cpu0;
  const m1 = await (await fetch(`${a.url}/metrics`)).text();
  const events = sumMetric(m1, "svc_ebpf_ringbuf_events_total") - sumMetric(m0, "svc_ebpf_ringbuf_events_total");
  const lost = sumMetric(m1, "svc_ebpf_ringbuf_lost_total") - sumMetric(m0, "svc_ebpf_ringbuf_lost_total");
  const spans = sumMetric(m1, "svc_spans_exported_total") - sumMetric(m0, "svc_spans_exported_total");
  const spansDropped = sumMetric(m1, "svc_spans_dropped_total") - sumMetric(m0, "svc_spans_dropped_total");
  const before = byLabel(m0, "svc_spans_dropped_total", "reason");
  const droppedBy = [...byLabel(m1, "svc_spans_dropped_total", "reason")].map(([k, v]) => `${k} ${v - (before.get(k) ?? 0)}`).filter((x) => !x.endsWith(" 0"));
  const conns = Number(/connections=(\d+)/.exec(stormOut)?.[1] ?? 0);
  await stop(a.proc);

  // Breakdown: which subsystem costs how much start time and memory (cumulative layers, same settle time).
  const breakdown: string[] = [];
  for (let n = 0; n <= LAYERS.length; n++) {
    const on = new Set(LAYERS.slice(0, n));
    const port = freePort();
    const cfg = join(dir, `layer-${n}.yaml`);
    writeFileSync(cfg, agentConfig(port, receiver.address, on));
    const s = await startTimed([BINARY, "--config", cfg], port, false);
    await Bun.sleep(BREAKDOWN_SETTLE_S * 1000);
    const rss = rssBytes(s.proc.pid!);
    const mem = memoryBreakdown(s.proc.pid!);
    const split = { anon: mem.anonymous, file: mem.rss - mem.anonymous };
    await stop(s.proc);
    const label = n === 0 ? "nothing but the HTTP interface and export" : `+ ${LAYERS[n - 1]}`;
    breakdown.push(`${label}: /healthz ${s.healthzMs.toFixed(0)} ms, RSS ${(rss / MB).toFixed(1)} MB (anonymous ${(split.anon / MB).toFixed(1)}, file-backed ${(split.file / MB).toFixed(1)})`);
    console.log(`breakdown: ${breakdown.at(-1)}`);
  }
  notes.push(`breakdown, subsystems added one by one (each a fresh start, RSS after ${BREAKDOWN_SETTLE_S} s): ${breakdown.join("; ")}`);
  const idleSplit = { anon: idleMem.anonymous, file: idleMem.rss - idleMem.anonymous };
  notes.push(`idle RSS of the full agent: anonymous ${(idleSplit.anon / MB).toFixed(1)} MB, file-backed ${(idleSplit.file / MB).toFixed(1)} MB (pages of the ${(statSync(BINARY).size / MB).toFixed(0)} MB binary and libraries, and BPF map mappings: ${(idleBpfRss / MB).toFixed(1)} MB)`);

  const eventsPerS = events / seconds;
  const spansPerS = spans / seconds;
  const binaryMb = statSync(BINARY).size / MB;
  const bareMb = statSync(bareBin).size / MB;
  rows.push(
    { name: "start to GET /healthz 200", agent: median(healthz), reference: median(bareStarts), referenceName: "bare compiled Bun.serve binary", unit: "ms", target: `< ${TARGET_HEALTHZ_MS} ms`, met: median(healthz) < TARGET_HEALTHZ_MS },
    { name: "start to GET /ready 200, eBPF loaded", agent: median(ready), unit: "ms", target: `< ${TARGET_READY_MS} ms`, met: median(ready) < TARGET_READY_MS },
    { name: `idle RSS, every subsystem on, after ${IDLE_S} s`, agent: idleRss / MB, reference: bareRss / MB, referenceName: "bare compiled Bun.serve binary", unit: "MB", target: `< ${TARGET_IDLE_RSS_MB} MB`, met: idleRss / MB < TARGET_IDLE_RSS_MB },
    { name: "idle RSS without the BPF ring buffer mappings (kernel memory mapped into the agent)", agent: (idleRss - idleBpfRss) / MB, unit: "MB" },
    { name: "peak RSS under the connect storm", agent: peakRss / MB, reference: idleRss / MB, referenceName: "same agent idle", unit: "MB", target: `< ${TARGET_LOAD_RSS_MB} MB`, met: peakRss / MB < TARGET_LOAD_RSS_MB },
    { name: "eBPF ring buffer events received under the storm", agent: eventsPerS, unit: "events/s", target: `load of ${TARGET_EVENTS_PER_S.toLocaleString("en-US")} events/s reached`, met: eventsPerS >= TARGET_EVENTS_PER_S },
    { name: "spans exported under the storm", agent: spansPerS, unit: "spans/s", target: `load of ${TARGET_SPANS_PER_S.toLocaleString("en-US")} spans/s reached`, met: spansPerS >= TARGET_SPANS_PER_S },
    { name: "agent CPU per 1,000 ring buffer events (all its work under the storm)", agent: events > 0 ? (cpu * 1000 * 1000) / events : Number.NaN, unit: "CPU ms" },
    { name: "agent CPU under the storm", agent: (cpu / seconds) * 100, unit: "% of one core" },
    { name: "binary size", agent: binaryMb, reference: bareMb, referenceName: "bare compiled Bun.serve binary", unit: "MB" },
  );
  notes.push(
    `starts: median of ${STARTS}; /healthz ${healthz.map((x) => x.toFixed(0)).join(", ")} ms; /ready ${ready.map((x) => x.toFixed(0)).join(", ")} ms (polled every ${POLL_MS} ms from spawn)`,
    `storm: ${conns} connections in ${seconds.toFixed(1)} s (${(conns / seconds).toFixed(0)}/s asked ${CONNS_PER_S}/s); ${events} ring buffer events (${lost} lost), ${spans} spans exported, ${spansDropped} spans dropped${droppedBy.length ? ` (${droppedBy.join(", ")})` : ""}; agent CPU ${cpu.toFixed(2)} s`,
    DOCKER_PRESENT ? "Docker daemon present: /ready was 200" : `no Docker daemon (${DOCKER_SOCKET} absent): docker discovery (enabled: auto) waits for the socket without holding /ready back`,
    "the storm and the agent share the machine's cores: the events/s reached is bounded by how fast the storm can open loopback connections here",
  );
}

/** The embedded defaults with the listen address and the OTLP endpoint on loopback, plus `extra` lines under agent:. */
function defaultsConfig(port: number, extra = ""): string {
  const text = readFileSync(resolve(import.meta.dir, "../src/config/default.yaml"), "utf8")
    .replace(/listen: "?:19090"?/, `listen: 127.0.0.1:${port}`)
    .replace(/endpoint: 127\.0\.0\.1:4317/, `endpoint: ${receiver.address}`);
  if (!text.includes(`127.0.0.1:${port}`) || !text.includes(receiver.address)) throw new Error("src/config/default.yaml: listen or endpoint not found");
  return extra ? text.replace(/^agent:\n/m, `agent:\n${extra}`) : text;
}

/** A memory cgroup of the bench's own (v2, else v1), to read what the kernel charges the agent. */
function memoryCgroup(name: string): { argv(cmd: string[]): string[]; bytes(): number; remove(): void } | undefined {
  const v2 = existsSync("/sys/fs/cgroup/cgroup.controllers");
  const path = v2 ? `/sys/fs/cgroup/${name}` : `/sys/fs/cgroup/memory/${name}`;
  try {
    mkdirSync(path);
  } catch {
    return undefined;
  }
  const file = v2 ? "memory.current" : "memory.usage_in_bytes";
  if (!existsSync(join(path, file))) return undefined;
  return {
    argv: (cmd) => ["sh", "-c", `echo $$ > ${path}/cgroup.procs && exec "$@"`, "sh", ...cmd],
    bytes: () => Number(readFileSync(join(path, file), "utf8").trim()),
    remove: () => {
      try {
        rmdirSync(path);
      } catch {
        // still holds a process that has not been reaped
      }
    },
  };
}

async function defaultsSection(bareStarts: number[]): Promise<void> {
  const healthz: number[] = [];
  const ready: number[] = [];
  for (let i = 0; i < STARTS; i++) {
    const port = freePort();
    const cfg = join(dir, `defaults-${i}.yaml`);
    writeFileSync(cfg, defaultsConfig(port));
    const last = i === STARTS - 1;
    const cg = last ? memoryCgroup(`svc-bench-${process.pid}`) : undefined;
    const argv = [BINARY, "--config", cfg];
    const s = await startTimed(cg ? cg.argv(argv) : argv, port, true);
    healthz.push(s.healthzMs);
    ready.push(s.readyMs!);
    if (!last) {
      await stop(s.proc);
      continue;
    }
    // The reference runs beside the agent for the same time, in a memory cgroup of its own too.
    const started = performance.now() - s.healthzMs;
    const barePort = freePort();
    const bareCg = memoryCgroup(`svc-bench-bare-${process.pid}`);
    const bare = await startTimed(bareCg ? bareCg.argv([bareBin, String(barePort)]) : [bareBin, String(barePort)], barePort, false);
    await Bun.sleep(Math.max(0, DEFAULTS_IDLE_S * 1000 - (performance.now() - started)));
    const agentMem = memoryBreakdown(s.proc.pid!);
    const bareMem = memoryBreakdown(bare.proc.pid!);
    const cgroupBytes = cg?.bytes();
    const bareCgroupBytes = bareCg?.bytes();
    // Again later: memory released after start-up that came back (pages unmapped and faulted in again) shows here.
    const recheck = DEFAULTS_RECHECK_S > DEFAULTS_IDLE_S;
    if (recheck) await Bun.sleep(Math.max(0, DEFAULTS_RECHECK_S * 1000 - (performance.now() - started)));
    const agentLater = recheck ? memoryBreakdown(s.proc.pid!) : undefined;
    const bareLater = recheck ? memoryBreakdown(bare.proc.pid!) : undefined;
    const cgroupLater = recheck ? cg?.bytes() : undefined;
    await stop(s.proc);
    await stop(bare.proc);
    cg?.remove();
    bareCg?.remove();
    const ref = { referenceName: "bare compiled Bun.serve binary, same time", unit: "MB" } as const;
    rows.push(
      { name: "embedded defaults: start to GET /healthz 200", agent: median(healthz), reference: median(bareStarts), referenceName: "bare compiled Bun.serve binary", unit: "ms", target: `<= ${TARGET_HEALTHZ_MS} ms`, met: median(healthz) <= TARGET_HEALTHZ_MS },
      { name: "embedded defaults: start to GET /ready 200, network tracing loaded", agent: median(ready), unit: "ms", target: `<= ${TARGET_DEFAULTS_READY_MS} ms`, met: median(ready) <= TARGET_DEFAULTS_READY_MS },
      { name: `embedded defaults, network tracing on: RSS ${DEFAULTS_IDLE_S} s after start`, agent: agentMem.rss / MB, reference: bareMem.rss / MB, ...ref, target: `<= ${TARGET_DEFAULTS_RSS_MB} MB`, met: agentMem.rss / MB <= TARGET_DEFAULTS_RSS_MB },
    );
    if (cgroupBytes !== undefined)
      rows.push({ name: `embedded defaults: the agent's own memory cgroup ${DEFAULTS_IDLE_S} s after start`, agent: cgroupBytes / MB, reference: bareCgroupBytes === undefined ? undefined : bareCgroupBytes / MB, ...ref, target: `<= ${TARGET_DEFAULTS_RSS_MB} MB`, met: cgroupBytes / MB <= TARGET_DEFAULTS_RSS_MB });
    rows.push(
      { name: "  of the RSS: anonymous (JavaScript heap, allocators, JIT code, stacks)", agent: agentMem.anonymous / MB, reference: bareMem.anonymous / MB, ...ref },
      { name: "  of the RSS: pages of the executable file (shared with every process running it)", agent: agentMem.executableFile / MB, reference: bareMem.executableFile / MB, ...ref },
      { name: "  of those: Bun's code", agent: agentMem.executableCode / MB, reference: bareMem.executableCode / MB, ...ref },
      { name: "  of those: the embedded bundle (.bun: bytecode, sources, BPF objects)", agent: agentMem.executableBundle / MB, reference: bareMem.executableBundle / MB, ...ref },
      { name: "  of the RSS: shared libraries (libc, libbpf ...)", agent: agentMem.libraries / MB, reference: bareMem.libraries / MB, ...ref },
      { name: "  of the RSS: BPF maps mapped in (ring buffers: each data area mapped twice)", agent: agentMem.bpfMaps / MB, unit: "MB" },
    );
    if (agentLater && bareLater)
      rows.push(
        { name: `embedded defaults: RSS ${DEFAULTS_RECHECK_S} s after start`, agent: agentLater.rss / MB, reference: bareLater.rss / MB, ...ref, target: `<= ${TARGET_DEFAULTS_RSS_MB} MB`, met: agentLater.rss / MB <= TARGET_DEFAULTS_RSS_MB },
        { name: `  of it: the embedded bundle's pages, ${DEFAULTS_RECHECK_S} s after start`, agent: agentLater.executableBundle / MB, reference: agentMem.executableBundle / MB, referenceName: `the same at ${DEFAULTS_IDLE_S} s`, unit: "MB" },
      );
    if (cgroupLater !== undefined) rows.push({ name: `embedded defaults: the agent's own memory cgroup ${DEFAULTS_RECHECK_S} s after start`, agent: cgroupLater / MB, reference: cgroupBytes === undefined ? undefined : cgroupBytes / MB, referenceName: `the same at ${DEFAULTS_IDLE_S} s`, unit: "MB", target: `<= ${TARGET_DEFAULTS_RSS_MB} MB`, met: cgroupLater / MB <= TARGET_DEFAULTS_RSS_MB });
    notes.push(
      `embedded defaults: starts ${healthz.map((x) => x.toFixed(0)).join(", ")} ms to /healthz, ${ready.map((x) => x.toFixed(0)).join(", ")} ms to /ready; ${cgroupBytes === undefined ? "no memory cgroup could be made" : "the cgroup's figure counts the BPF maps and page cache first read in it, not the executable's pages already cached"}; JIT code ${(agentMem.jitCode / MB).toFixed(1)} MB of the anonymous; the agent traces every process's connections, so its anonymous memory follows the machine's traffic; load average ${readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`,
    );
  }
}

/** Starts a Bun.serve server on a free port in a child process; resolves with its URL and a stop function. */
async function httpServer(): Promise<{ url: string; stop(): Promise<void> }> {
  const proc = Bun.spawn([process.execPath, "-e", `const s = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("ok") }); console.log(s.port);`], { stdout: "pipe", stderr: "inherit" });
  const reader = proc.stdout.getReader();
  let text = "";
  while (!text.includes("\n")) text += new TextDecoder().decode((await reader.read()).value);
  reader.releaseLock();
  return { url: `http://127.0.0.1:${Number(text.trim())}/`, stop: async () => (proc.kill(), void (await proc.exited)) };
}

async function limiterSection(): Promise<void> {
  const port = freePort();
  const cfg = join(dir, "limiter.yaml");
  const extra = `  memory_limit:\n    limit: ${LIMIT_MIB}MiB\n`;
  writeFileSync(cfg, defaultsConfig(port, extra).replace(/network:\n(\s+)enabled: true/, (m, indent: string) => `${m}\n${indent}max_spans_per_second: 1000000`));
  if (!readFileSync(cfg, "utf8").includes("max_spans_per_second: 1000000")) throw new Error("could not raise the span cap in the defaults");
  const a = await startTimed([BINARY, "--config", cfg], port, true);
  const pid = a.proc.pid!;
  const memory = async () => ((await (await fetch(`${a.url}/status`)).json()) as { memory: { soft_limit_bytes: number; hard_limit_bytes: number; refusals: number; refused_in_kernel: number } }).memory;
  const limits = await memory();
  const server = await httpServer();
  const idle = rssBytes(pid);
  const storms: Array<{ name: string; run(): Promise<string> }> = [
    {
      name: `HTTP storm (wrk -t${HTTP_STORM_THREADS} -c${HTTP_STORM_CONNECTIONS}, keep-alive)`,
      run: async () => {
        const wrk = Bun.spawn(["wrk", `-t${HTTP_STORM_THREADS}`, `-c${HTTP_STORM_CONNECTIONS}`, `-d${LOAD_S}s`, server.url], { stdout: "pipe", stderr: "pipe" });
        const out = await new Response(wrk.stdout).text();
        await wrk.exited;
        return `${Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? 0).toFixed(0)} requests/s`;
      },
    },
    {
      name: `connect storm (${CONNS_PER_S} connections/s asked)`,
      run: async () => {
        const storm = Bun.spawn([stormBin, String(CONNS_PER_S), String(LOAD_S)], { stdout: "pipe" });
        const out = await new Response(storm.stdout).text();
        await storm.exited;
        return `${/connections=(\d+)/.exec(out)?.[1] ?? 0} connections`;
      },
    },
  ];
  try {
    let overallPeak = idle;
    for (const storm of storms) {
      const m0 = await (await fetch(`${a.url}/metrics`)).text();
      const mem0 = await memory();
      let peak = 0;
      const sampler = setInterval(() => (peak = Math.max(peak, rssBytes(pid))), RSS_SAMPLE_MS);
      const t0 = performance.now();
      const reached = await storm.run();
      const seconds = (performance.now() - t0) / 1000;
      clearInterval(sampler);
      peak = Math.max(peak, rssBytes(pid));
      overallPeak = Math.max(overallPeak, peak);
      const m1 = await (await fetch(`${a.url}/metrics`)).text();
      const mem1 = await memory();
      const exported = sumMetric(m1, "svc_spans_exported_total") - sumMetric(m0, "svc_spans_exported_total");
      const dropped = (byLabel(m1, "svc_spans_dropped_total", "reason").get("memory_limit") ?? 0) - (byLabel(m0, "svc_spans_dropped_total", "reason").get("memory_limit") ?? 0);
      rows.push({ name: `limiter: peak RSS under the ${storm.name}`, agent: peak / MB, reference: limits.hard_limit_bytes / MB, referenceName: "the hard limit", unit: "MB", target: "<= hard limit", met: peak <= limits.hard_limit_bytes });
      notes.push(
        `limiter, ${storm.name}: ${reached} in ${seconds.toFixed(1)} s; spans exported ${(exported / seconds).toFixed(0)}/s, spans dropped as memory_limit ${dropped}; soft limit crossed ${mem1.refusals - mem0.refusals} times, ${mem1.refused_in_kernel - mem0.refused_in_kernel} events refused in the kernel`,
      );
    }
    notes.push(`limiter: limit ${LIMIT_MIB} MiB (hard ${(limits.hard_limit_bytes / MB).toFixed(0)} MB, soft ${(limits.soft_limit_bytes / MB).toFixed(0)} MB), span cap raised to 1,000,000/s; idle RSS before the storms ${(idle / MB).toFixed(1)} MB, peak over both ${(overallPeak / MB).toFixed(1)} MB (sampled every ${RSS_SAMPLE_MS} ms)`);
  } finally {
    await server.stop();
    await stop(a.proc);
  }
}
