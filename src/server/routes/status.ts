/** GET /status and the per-subsystem views /status/ebpf, /status/export, /status/discovery. */
import { hostname, machine, release } from "node:os";
import { Elysia } from "elysia";
import { sizeBytes } from "../../config/units";
import type { Config } from "../../config/schema";
import { VIEWS, type DiscoveryView, type EbpfView, type ExportView, type ProfilingView } from "../../status/model";
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
      ringbuf: { size: sizeBytes(c.agent.ebpf.ringbuf_size), events_received: 0, events_lost: 0 },
    }
  );
}

function exportView(deps: ServerDeps, c: Config): ExportView {
  const q = (k: "traces" | "metrics" | "logs") => ({ size: 0, capacity: c.queues[k].capacity, exported: 0, dropped: 0 });
  return (
    deps.status.view<ExportView>(VIEWS.export) ?? {
      endpoint: c.otlp.endpoint,
      protocol: "grpc",
      tls: !c.otlp.insecure,
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

function profilingView(deps: ServerDeps, c: Config): ProfilingView {
  return deps.status.view<ProfilingView>(VIEWS.profiling) ?? { enabled: false, sample_rate: c.agent.profiling.sample_rate, profiles_collected: 0 };
}

function loadedPrograms(programs: EbpfView["programs"]): number {
  let n = 0;
  for (const p of programs) if (p.id > 0) n++;
  return n;
}

export function statusBody(deps: ServerDeps): StatusBody {
  const c = deps.config();
  const ebpf = ebpfView(deps, c);
  const exp = exportView(deps, c);
  const disc = discoveryView(deps, c);
  const prof = profilingView(deps, c);
  return {
    version: deps.build.version,
    commit: deps.build.commit,
    built: deps.build.built,
    uptime: formatUptime(Date.now() - deps.startedAt.getTime()),
    mode: c.mode,
    host: HOST,
    ebpf: {
      enabled: ebpf.enabled,
      programs_loaded: loadedPrograms(ebpf.programs),
      maps_created: ebpf.maps.length,
      ringbuf_size: ebpf.ringbuf.size,
    },
    profiling: { enabled: prof.enabled, sample_rate: prof.sample_rate, profiles_collected: prof.profiles_collected },
    export: {
      endpoint: exp.endpoint,
      connected: exp.connected,
      last_export: exp.last_export,
      spans_exported: exp.queues.traces.exported,
      metrics_exported: exp.queues.metrics.exported,
    },
    discovery: {
      kubernetes: disc.kubernetes.enabled && disc.kubernetes.connected,
      docker: disc.docker.enabled && disc.docker.connected,
      pods_discovered: disc.kubernetes.pods_watched,
      containers_discovered: disc.docker.containers,
    },
  };
}

const errors = COMMON_ERRORS;

export function statusRoutes(deps: ServerDeps, prefix = "", check = true) {
  const status = jsonAnswer(StatusSchema, check);
  return new Elysia({ name: "routes/status", seed: `${prefix}:${check}`, prefix })
    .get("/status", ({ set }) => status(set, 200, statusBody(deps)), {
      response: { 200: answer(StatusSchema, check), ...errors },
      detail: { summary: "Agent status", tags: ["status"] },
    })
    .get("/status/ebpf", () => ebpfView(deps, deps.config()), {
      response: { 200: answer(EbpfViewSchema, check), ...errors },
      detail: { summary: "eBPF programs, maps and ring buffer", tags: ["status"] },
    })
    .get("/status/export", () => exportView(deps, deps.config()), {
      response: { 200: answer(ExportViewSchema, check), ...errors },
      detail: { summary: "Export pipeline and queues", tags: ["status"] },
    })
    .get("/status/discovery", () => discoveryView(deps, deps.config()), {
      response: { 200: answer(DiscoveryViewSchema, check), ...errors },
      detail: { summary: "Kubernetes, Docker and cloud discovery", tags: ["status"] },
    });
}
