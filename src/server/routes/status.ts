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
import { answerResponse, checkerOf, JSON_CONTENT_TYPE, jsonAnswer } from "../answer";
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

/** The fields of the /status body that are the same for the whole life of the process (the build and the host). */
export const STATUS_CONSTANT_FIELDS = ["version", "commit", "built", "host"] as const;
/** Every field of the /status body, in order: constant ones, the two read at each request (uptime, mode), the sections. */
export const STATUS_FIELDS = ["version", "commit", "built", "uptime", "mode", "host", ...SECTIONS.map((s) => s.name)];

function bodyOf(deps: ServerDeps, uptime: string, mode: string, summaries: readonly unknown[]): StatusBody {
  const body: Record<string, unknown> = {
    version: deps.build.version,
    commit: deps.build.commit,
    built: deps.build.built,
    uptime,
    mode,
    host: HOST,
  };
  for (let i = 0; i < SECTIONS.length; i++) body[SECTIONS[i]!.name] = summaries[i];
  return body as StatusBody;
}

/** The /status body, built in one pass with one shape; every figure read now. */
export function statusBody(deps: ServerDeps): StatusBody {
  const c = deps.config();
  return bodyOf(deps, uptimeNow(deps.startedAt.getTime()), c.mode, SECTIONS.map((s) => deps.status.summaryOf(s, c)));
}

/** Whether `a` and `b` have the same leaves (primitives identical, objects with the same keys, arrays the same length). */
export function sameLeaves(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object") return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameLeaves(a[i], b[i])) return false;
    return true;
  }
  let keys = 0;
  for (const k in a) {
    keys++;
    if (!sameLeaves((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return false;
  }
  for (const _ in b) keys--;
  return keys === 0;
}

/**
 * The /status answer: every figure is read at each request (the subsystems' summaries, the uptime, the mode) and
 * compared, section by section, with those of the previous answer, whose text is reused while none changed (the
 * build and host fields never change). Building the body and walking all its leaves into a list at every request
 * cost about a tenth of the route's requests/s in the binary (bench/findings.md, "http").
 */
export class StatusAnswer {
  #body: StatusBody | undefined;
  #text = "";
  #uptime = "";
  #mode = "";
  readonly #summaries: unknown[] = SECTIONS.map(() => undefined);

  constructor(private readonly deps: ServerDeps) {}

  /** The body of the text `now` gave last. */
  get body(): StatusBody | undefined {
    return this.#body;
  }

  /** The answer's text, with every figure as read now. */
  now(): string {
    const d = this.deps;
    const c = d.config();
    const uptime = uptimeNow(d.startedAt.getTime());
    let same = this.#body !== undefined && uptime === this.#uptime && c.mode === this.#mode;
    for (let i = 0; i < SECTIONS.length; i++) {
      const summary = d.status.summaryOf(SECTIONS[i]!, c);
      if (same && !sameLeaves(summary, this.#summaries[i])) same = false;
      this.#summaries[i] = summary;
    }
    if (!same) {
      this.#uptime = uptime;
      this.#mode = c.mode;
      this.#body = bodyOf(d, uptime, c.mode, this.#summaries);
      this.#text = JSON.stringify(this.#body);
    }
    return this.#text;
  }
}

const errors = COMMON_ERRORS;

export function statusRoutes(deps: ServerDeps, prefix = "", check = true) {
  const statusAnswer = new StatusAnswer(deps);
  const statusChecker = check ? checkerOf(StatusSchema) : undefined;
  const ebpf = jsonAnswer(EbpfViewSchema, check);
  const exp = jsonAnswer(ExportViewSchema, check);
  const discovery = jsonAnswer(DiscoveryViewSchema, check);
  return new Elysia({ name: "routes/status", seed: `${prefix}:${check}`, prefix })
    .get("/status", ({ set }) => {
      const text = statusAnswer.now();
      statusChecker?.(statusAnswer.body);
      return answerResponse(set, 200, text, JSON_CONTENT_TYPE);
    }, {
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
