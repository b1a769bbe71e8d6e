/** GET /status and the per-subsystem views /status/ebpf, /status/export, /status/discovery. */
import { hostname, machine, release } from "node:os";
import { Elysia } from "elysia";
import { sizeBytes } from "../../config/units";
import type { Config } from "../../config/schema";
import { signalTarget } from "../../export/config";
import { VIEWS, type DiscoverySummary, type DiscoveryView, type EbpfSummary, type EbpfView, type ExportSummary, type ExportView, type ProfilingView } from "../../status/model";
import { MEMORY_VIEW } from "../../memory/limiter";
import { jsonAnswer } from "../answer";
import type { ServerDeps } from "../deps";
import { answer, COMMON_ERRORS, DiscoveryViewSchema, EbpfViewSchema, ExportViewSchema, StatusSchema, type StatusBody } from "../model";

const HOST = { name: hostname(), os: process.platform, arch: machine(), kernel: release() };

/** `<h>h<m>m<s>s` */
export function formatUptime(ms: number): string {
  const total = Math.floor(ms / 1000);
  return `${Math.floor(total / 3600)}h${Math.floor((total % 3600) / 60)}m${total % 60}s`;
}

/** What a subsystem that publishes no view reports: disabled, zero, never invented figures. */
function ebpfView(deps: ServerDeps, c: Config): EbpfView {
  return (
    deps.status.view<EbpfView>(VIEWS.ebpf) ?? {
      enabled: false,
      programs: [],
      maps: [],
      ringbuf: { size: c.agent.ebpf.ringbuf_size === "auto" ? 0 : sizeBytes(c.agent.ebpf.ringbuf_size), events_received: 0, events_lost: 0 },
    }
  );
}

function exportView(deps: ServerDeps, c: Config): ExportView {
  const q = (k: "traces" | "metrics" | "logs") => ({ size: 0, capacity: c.queues[k].capacity, exported: 0, dropped: 0 });
  return (
    deps.status.view<ExportView>(VIEWS.export) ?? {
      endpoint: c.otlp.endpoint,
      protocol: c.otlp.protocol,
      tls: !signalTarget(c.otlp, "traces").insecure,
      compression: c.otlp.compression,
      connected: false,
      last_export: null,
      last_error: "export pipeline not running",
      queues: { traces: q("traces"), metrics: q("metrics"), logs: q("logs") },
    }
  );
}

function discoveryView(deps: ServerDeps, c: Config): DiscoveryView {
  return (
    deps.status.view<DiscoveryView>(VIEWS.discovery) ?? {
      kubernetes: { enabled: false, connected: false, cluster: c.agent.discovery.kubernetes.cluster_name, namespace: "", pods_watched: 0, services_watched: 0 },
      docker: { enabled: false, connected: false, containers: 0 },
      cloud: { provider: "none", region: "", instance_id: "" },
      discovered_services: [],
    }
  );
}

function memoryView(deps: ServerDeps): StatusBody["memory"] {
  return deps.status.view<StatusBody["memory"]>(MEMORY_VIEW) ?? { enabled: false, resident_bytes: 0, soft_limit_bytes: 0, hard_limit_bytes: 0, refusing: false, refusals: 0, refused_in_kernel: 0 };
}

function profilingView(deps: ServerDeps, c: Config): ProfilingView {
  return deps.status.view<ProfilingView>(VIEWS.profiling) ?? { enabled: false, sample_rate: c.agent.profiling.sample_rate, profiles_collected: 0 };
}

function loadedPrograms(programs: EbpfView["programs"]): number {
  let n = 0;
  for (const p of programs) if (p.id > 0) n++;
  return n;
}

/** The summaries the subsystems publish, else derived from their full views (or the disabled defaults). */
function ebpfSummary(deps: ServerDeps, c: Config): EbpfSummary {
  const s = deps.status.summary<EbpfSummary>(VIEWS.ebpf);
  if (s) return s;
  const v = ebpfView(deps, c);
  return { enabled: v.enabled, programs_loaded: loadedPrograms(v.programs), maps_created: v.maps.length, ringbuf_size: v.ringbuf.size };
}

function exportSummary(deps: ServerDeps, c: Config): ExportSummary {
  const s = deps.status.summary<ExportSummary>(VIEWS.export);
  if (s) return s;
  const v = exportView(deps, c);
  return { endpoint: v.endpoint, connected: v.connected, last_export: v.last_export, spans_exported: v.queues.traces.exported, metrics_exported: v.queues.metrics.exported };
}

function discoverySummary(deps: ServerDeps, c: Config): DiscoverySummary {
  const s = deps.status.summary<DiscoverySummary>(VIEWS.discovery);
  if (s) return s;
  const v = discoveryView(deps, c);
  return {
    kubernetes: v.kubernetes.enabled && v.kubernetes.connected,
    docker: v.docker.enabled && v.docker.connected,
    pods_discovered: v.kubernetes.pods_watched,
    containers_discovered: v.docker.containers,
  };
}

/** formatUptime of the last whole second asked for: the text changes once a second, so most answers reuse it. */
let uptimeSecond = -1;
let uptimeText = "";
function uptimeNow(startedAtMs: number): string {
  const ms = Date.now() - startedAtMs;
  const second = Math.floor(ms / 1000);
  if (second !== uptimeSecond) {
    uptimeText = formatUptime(ms);
    uptimeSecond = second;
  }
  return uptimeText;
}

/** The /status body, built in one pass with one shape; every figure read now. */
export function statusBody(deps: ServerDeps): StatusBody {
  const c = deps.config();
  const ebpf = ebpfSummary(deps, c);
  const exp = exportSummary(deps, c);
  const disc = discoverySummary(deps, c);
  const prof = profilingView(deps, c);
  const mem = memoryView(deps);
  return {
    version: deps.build.version,
    commit: deps.build.commit,
    built: deps.build.built,
    uptime: uptimeNow(deps.startedAt.getTime()),
    mode: c.mode,
    host: HOST,
    ebpf: { enabled: ebpf.enabled, programs_loaded: ebpf.programs_loaded, maps_created: ebpf.maps_created, ringbuf_size: ebpf.ringbuf_size },
    profiling: { enabled: prof.enabled, sample_rate: prof.sample_rate, profiles_collected: prof.profiles_collected },
    export: {
      endpoint: exp.endpoint,
      connected: exp.connected,
      last_export: exp.last_export,
      spans_exported: exp.spans_exported,
      metrics_exported: exp.metrics_exported,
    },
    discovery: {
      kubernetes: disc.kubernetes,
      docker: disc.docker,
      pods_discovered: disc.pods_discovered,
      containers_discovered: disc.containers_discovered,
    },
    memory: {
      enabled: mem.enabled,
      resident_bytes: mem.resident_bytes,
      soft_limit_bytes: mem.soft_limit_bytes,
      hard_limit_bytes: mem.hard_limit_bytes,
      refusing: mem.refusing,
      refusals: mem.refusals,
      refused_in_kernel: mem.refused_in_kernel,
    },
  };
}

/**
 * Every leaf of a /status body in a fixed order (for jsonAnswer: an answer with the same leaves reuses the
 * previous text). A field added to StatusBody must be added here: the status route test compares the answer with
 * JSON.stringify of a freshly built body after each figure changes.
 */
export function statusFigures(b: StatusBody, out: unknown[]): void {
  out.push(b.version, b.commit, b.built, b.uptime, b.mode, b.host.name, b.host.os, b.host.arch, b.host.kernel);
  out.push(b.ebpf.enabled, b.ebpf.programs_loaded, b.ebpf.maps_created, b.ebpf.ringbuf_size);
  out.push(b.profiling.enabled, b.profiling.sample_rate, b.profiling.profiles_collected);
  out.push(b.export.endpoint, b.export.connected, b.export.last_export, b.export.spans_exported, b.export.metrics_exported);
  out.push(b.discovery.kubernetes, b.discovery.docker, b.discovery.pods_discovered, b.discovery.containers_discovered);
  out.push(b.memory.enabled, b.memory.resident_bytes, b.memory.soft_limit_bytes, b.memory.hard_limit_bytes, b.memory.refusing, b.memory.refusals, b.memory.refused_in_kernel);
}

const errors = COMMON_ERRORS;

export function statusRoutes(deps: ServerDeps, prefix = "", check = true) {
  const status = jsonAnswer(StatusSchema, check, statusFigures);
  const ebpf = jsonAnswer(EbpfViewSchema, check);
  const exp = jsonAnswer(ExportViewSchema, check);
  const discovery = jsonAnswer(DiscoveryViewSchema, check);
  return new Elysia({ name: "routes/status", seed: `${prefix}:${check}`, prefix })
    .get("/status", ({ set }) => status(set, 200, statusBody(deps)), {
      response: { 200: answer(StatusSchema, check), ...errors },
      detail: { summary: "Agent status", tags: ["status"] },
    })
    .get("/status/ebpf", ({ set }) => ebpf(set, 200, ebpfView(deps, deps.config())), {
      response: { 200: answer(EbpfViewSchema, check), ...errors },
      detail: { summary: "eBPF programs, maps and ring buffer", tags: ["status"] },
    })
    .get("/status/export", ({ set }) => exp(set, 200, exportView(deps, deps.config())), {
      response: { 200: answer(ExportViewSchema, check), ...errors },
      detail: { summary: "Export pipeline and queues", tags: ["status"] },
    })
    .get("/status/discovery", ({ set }) => discovery(set, 200, discoveryView(deps, deps.config())), {
      response: { 200: answer(DiscoveryViewSchema, check), ...errors },
      detail: { summary: "Kubernetes, Docker and cloud discovery", tags: ["status"] },
    });
}
