/** GET /status and the per-subsystem views /status/ebpf, /status/export, /status/discovery. */
import { hostname, machine, release } from "node:os";
import { Elysia } from "elysia";
import type { Config } from "../../config/schema";
import { DISCOVERY_STATUS, DiscoveryViewSchema } from "../../discovery/status";
import { EBPF_STATUS, EbpfViewSchema } from "../../ebpf/status";
import { EXPORT_STATUS, ExportViewSchema } from "../../export/status";
import { PROFILING_STATUS } from "../../collectors/profiling/status";
import { MEMORY_STATUS } from "../../memory/status";
import type { StatusSection } from "../../status/model";
import { figuresOf, jsonAnswer } from "../answer";
import type { ServerDeps } from "../deps";
import { COMMON_ERRORS, responses, StatusSchema, type StatusBody } from "../model";

const HOST = { name: hostname(), os: process.platform, arch: machine(), kernel: release() };

/** `<h>h<m>m<s>s` */
export function formatUptime(ms: number): string {
  const total = Math.floor(ms / 1000);
  return `${Math.floor(total / 3600)}h${Math.floor((total % 3600) / 60)}m${total % 60}s`;
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

/** The subsystems' parts of GET /status, in the body's order; each section is defined beside its subsystem. */
const SECTIONS = [EBPF_STATUS, PROFILING_STATUS, EXPORT_STATUS, DISCOVERY_STATUS, MEMORY_STATUS] as ReadonlyArray<StatusSection<unknown, unknown, Config>>;

/** The /status body, built in one pass with one shape; every figure read now. */
export function statusBody(deps: ServerDeps): StatusBody {
  const c = deps.config();
  const body: Record<string, unknown> = {
    version: deps.build.version,
    commit: deps.build.commit,
    built: deps.build.built,
    uptime: uptimeNow(deps.startedAt.getTime()),
    mode: c.mode,
    host: HOST,
  };
  for (const section of SECTIONS) body[section.name] = deps.status.summaryOf(section, c);
  return body as StatusBody;
}

/** Every leaf of a /status body, in order: derived from the body, which is built with one shape. */
export const statusFigures = figuresOf;

const errors = COMMON_ERRORS;

export function statusRoutes(deps: ServerDeps, prefix = "", check = true) {
  const status = jsonAnswer(StatusSchema, check, figuresOf);
  const ebpf = jsonAnswer(EbpfViewSchema, check);
  const exp = jsonAnswer(ExportViewSchema, check);
  const discovery = jsonAnswer(DiscoveryViewSchema, check);
  return new Elysia({ name: "routes/status", seed: `${prefix}:${check}`, prefix })
    .get("/status", ({ set }) => status(set, 200, statusBody(deps)), {
      response: responses(check, { 200: StatusSchema, ...errors }),
      detail: { summary: "Agent status", tags: ["status"] },
    })
    .get("/status/ebpf", ({ set }) => ebpf(set, 200, deps.status.viewOf(EBPF_STATUS, deps.config())), {
      response: responses(check, { 200: EbpfViewSchema, ...errors }),
      detail: { summary: "eBPF programs, maps and ring buffer", tags: ["status"] },
    })
    .get("/status/export", ({ set }) => exp(set, 200, deps.status.viewOf(EXPORT_STATUS, deps.config())), {
      response: responses(check, { 200: ExportViewSchema, ...errors }),
      detail: { summary: "Export pipeline and queues", tags: ["status"] },
    })
    .get("/status/discovery", ({ set }) => discovery(set, 200, deps.status.viewOf(DISCOVERY_STATUS, deps.config())), {
      response: responses(check, { 200: DiscoveryViewSchema, ...errors }),
      detail: { summary: "Kubernetes, Docker and cloud discovery", tags: ["status"] },
    });
}
