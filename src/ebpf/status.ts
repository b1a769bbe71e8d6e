/** The `ebpf` status view (GET /status/ebpf) and its fields of GET /status. */
import { Type, type Static } from "@sinclair/typebox";
import type { Config } from "../config/schema";
import { bytesOf } from "../config/units";
import { Count, type StatusSection } from "../status/model";

export const EbpfProgramSchema = Type.Object({
  name: Type.String(),
  type: Type.String({ description: "kprobe, tracepoint, raw_tp, tp_btf, perf_event, uprobe, ..." }),
  attached: Type.Boolean(),
  id: Type.Integer({ description: "Kernel program id (0 when not loaded)." }),
  reason: Type.Optional(Type.String({ description: "Why the program is not attached." })),
});

export const EbpfMapSchema = Type.Object({
  name: Type.String(),
  type: Type.String({ description: "hash, array, ringbuf, percpu_array, ..." }),
  entries: Count("Current entries."),
  max_entries: Count("Capacity."),
});

export const TlsTargetSchema = Type.Object({
  path: Type.String({ description: "The library (or executable) path in the process's mount namespace." }),
  kind: Type.Union([Type.Literal("shared"), Type.Literal("static")], { description: "shared: a libssl; static: an executable with OpenSSL linked in." }),
  state: Type.Union([Type.Literal("attached"), Type.Literal("failed"), Type.Literal("not_traceable"), Type.Literal("limit")], {
    description: "attached: probes live; failed: SSL_read/SSL_write could not be probed; not_traceable: OpenSSL linked in without symbols; limit: over agent.ebpf.network.max_tls_libraries.",
  }),
  reason: Type.Optional(Type.String({ description: "Why the target is not attached." })),
  functions: Type.Array(Type.String(), { description: "Functions probed at entry and return." }),
  processes: Count("Processes mapping the file."),
  pids: Type.Array(Type.Integer(), { description: "Some of those processes (at most 32)." }),
  detach_at: Type.Optional(
    Type.String({ format: "date-time", description: "Attached while no process maps the file (the last one exited or unmapped it): when its probes are detached unless a process maps it again." }),
  ),
});

/** `ebpf` view: GET /status/ebpf. */
export const EbpfViewSchema = Type.Object({
  enabled: Type.Boolean(),
  programs: Type.Array(EbpfProgramSchema),
  maps: Type.Array(EbpfMapSchema),
  ringbuf: Type.Object({
    size: Count("Bytes."),
    events_received: Count("Events read from every ring buffer."),
    events_lost: Count("Reservations that failed in the kernel."),
  }),
  tls: Type.Optional(Type.Array(TlsTargetSchema, { description: "TLS libraries probed (ebpf/tls), per file, with the processes using each; absent when TLS tracing is off." })),
});
export type EbpfView = Static<typeof EbpfViewSchema>;

/** What GET /status shows of the view; the eBPF core publishes it from counts it keeps (no list copied). */
export const EbpfSummarySchema = Type.Object({
  enabled: Type.Boolean(),
  // Programs with a kernel id (> 0).
  programs_loaded: Type.Integer({ minimum: 0 }),
  // Entries of the view's `maps`.
  maps_created: Type.Integer({ minimum: 0 }),
  // The view's `ringbuf.size`.
  ringbuf_size: Type.Integer({ minimum: 0, description: "Bytes." }),
});
export type EbpfSummary = Static<typeof EbpfSummarySchema>;

export const EBPF_STATUS: StatusSection<EbpfView, EbpfSummary, Config> = {
  name: "ebpf",
  disabled: (c) => ({
    enabled: false,
    programs: [],
    maps: [],
    ringbuf: { size: c.agent.ebpf.ringbuf_size === "auto" ? 0 : bytesOf(c.agent.ebpf, "ringbuf_size"), events_received: 0, events_lost: 0 },
  }),
  summary: (v) => {
    let loaded = 0;
    for (const p of v.programs) if (p.id > 0) loaded++;
    return { enabled: v.enabled, programs_loaded: loaded, maps_created: v.maps.length, ringbuf_size: v.ringbuf.size };
  },
};
