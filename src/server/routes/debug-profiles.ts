/**
 * The pprof-style profiles served under /debug/pprof/: profile.proto (gzip) by default, so `go tool pprof`
 * reads them; goroutine also as text (?debug=1 counts, ?debug=2 stacks); trace as Chrome trace-event JSON (gzip).
 */
import { gzipSync } from "node:zlib";
import type { ServerDeps } from "../deps";
import { ApiError } from "../errors";
import { cpuProfileToPprof, ProfilerBusyError, sampleCpu } from "../../debug/cpu-profile";
import { heapProfile } from "../../debug/heap-profile";
import type { PprofBuilder } from "../../debug/pprof";
import { debugRuntimeFor, TraceBusyError } from "../../debug/runtime";
import { blockProfile, goroutineCountsText, goroutineProfile, goroutineStacksText, mutexProfile, threadcreateProfile } from "../../debug/runtime-profiles";

export const PROFILES = ["profile", "heap", "allocs", "goroutine", "threadcreate", "block", "mutex", "trace"] as const;
export type ProfileName = (typeof PROFILES)[number];

/** Default and bounds of ?seconds= for profile and trace. */
export const DEFAULT_SECONDS = { profile: 30, trace: 1 } as const;
export const MAX_SECONDS = 300;

const DESCRIPTIONS: Record<ProfileName, string> = {
  profile: "CPU profile of the agent's JavaScript. ?seconds=N (default 30, 1..300). One at a time.",
  heap: "Live JavaScript objects by type (inuse_objects; the heap's size as inuse_space). ?gc=1 collects first; ?snapshot=1 adds sizes per type and function names from a heap snapshot (blocks the agent for seconds).",
  allocs: "Same as heap (the runtime records no allocation sites or cumulative allocations).",
  goroutine: "The agent's tasks, workers and in-flight operations with where they started. ?debug=1 counts, ?debug=2 stacks as text.",
  threadcreate: "The process' OS threads (/proc/self/task).",
  block: "Event-loop blocks and the operations running during them; comments carry the event-loop delay histogram.",
  mutex: "Waits for the agent's locks (the reload lock).",
  trace: "Execution trace of the agent's operations over ?seconds=N (default 1, 1..300): Chrome trace-event JSON, gzip (open in ui.perfetto.dev or chrome://tracing).",
};

/** Answers one profile request (or the index). */
export async function profileResponse(deps: ServerDeps, name: ProfileName | "index", url: URL, signal?: AbortSignal): Promise<Response> {
  const q = url.searchParams;
  switch (name) {
    case "index":
      return new Response(indexPage(deps), { headers: { "content-type": "text/html; charset=utf-8" } });
    case "profile": {
      const seconds = secondsParam(q, DEFAULT_SECONDS.profile);
      try {
        return proto(cpuProfileToPprof(await sampleCpu(seconds, signal)), "profile");
      } catch (e) {
        if (e instanceof ProfilerBusyError) throw busy("profile", e.endsAt);
        throw e;
      }
    }
    case "heap":
    case "allocs":
      return proto(heapProfile(q.get("gc") === "1", q.get("snapshot") === "1"), name);
    case "goroutine": {
      const debug = q.get("debug");
      if (debug === "1") return text(goroutineCountsText(deps.tasks));
      if (debug === "2") return text(goroutineStacksText(deps.tasks));
      return proto(goroutineProfile(deps.tasks), name);
    }
    case "threadcreate":
      return proto(threadcreateProfile(), name);
    case "block":
      return proto(blockProfile(debugRuntimeFor(deps.tasks)), name);
    case "mutex":
      return proto(mutexProfile(deps.locks ?? []), name);
    case "trace": {
      const seconds = secondsParam(q, DEFAULT_SECONDS.trace);
      try {
        const t = await debugRuntimeFor(deps.tasks).trace(seconds, signal);
        const body = JSON.stringify({
          traceEvents: t.events,
          displayTimeUnit: "ms",
          otherData: { agent: "svc-agent", version: deps.build.version, seconds, started: new Date(Date.now() - seconds * 1000).toISOString(), dropped_events: t.dropped },
        });
        return new Response(gzipSync(body), {
          headers: { "content-type": "application/gzip", "content-disposition": 'attachment; filename="trace.json.gz"' },
        });
      } catch (e) {
        if (e instanceof TraceBusyError) throw busy("trace", e.endsAt);
        throw e;
      }
    }
  }
}

function secondsParam(q: URLSearchParams, fallback: number): number {
  const raw = q.get("seconds");
  if (raw === null) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > MAX_SECONDS)
    throw new ApiError(400, "invalid_request", `seconds must be an integer from 1 to ${MAX_SECONDS}`, { seconds: raw });
  return n;
}

function busy(profile: string, endsAt: Date): ApiError {
  const retry = Math.max(1, Math.ceil((endsAt.getTime() - Date.now()) / 1000));
  return new ApiError(503, "service_unavailable", `a ${profile} is already being taken; only one at a time`, { profile, busy_until: endsAt.toISOString(), reason: "in_progress" }, { "retry-after": String(retry) });
}

function proto(builder: PprofBuilder, name: string): Response {
  return new Response(builder.encode(), {
    headers: { "content-type": "application/octet-stream", "content-disposition": `attachment; filename="${name}"`, "x-content-type-options": "nosniff" },
  });
}

function text(body: string): Response {
  return new Response(body, { headers: { "content-type": "text/plain; charset=utf-8" } });
}

function indexPage(deps: ServerDeps): string {
  const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const counts: Partial<Record<ProfileName, number | string>> = {
    goroutine: deps.tasks.count(),
    block: debugRuntimeFor(deps.tasks).blocks().length,
  };
  const rows = PROFILES.map((p) => {
    const href = p === "profile" ? "profile?seconds=30" : p === "trace" ? "trace?seconds=1" : p;
    return `<tr><td align=right>${counts[p] ?? ""}</td><td><a href="${href}">${p}</a></td><td>${esc(DESCRIPTIONS[p])}</td></tr>`;
  }).join("\n");
  return `<!DOCTYPE html>
<html><head><title>/debug/pprof/</title></head>
<body>
<h1>/debug/pprof/</h1>
<p>svc-agent ${esc(deps.build.version)} (${esc(deps.build.commit)}), pid ${process.pid}</p>
<table>
<thead><td>Count</td><td>Profile</td><td></td></thead>
${rows}
</table>
<p><a href="goroutine?debug=1">goroutine?debug=1</a> counts, <a href="goroutine?debug=2">goroutine?debug=2</a> full stacks; <a href="../vars">/debug/vars</a></p>
<p>Read a profile with <code>go tool pprof -top http://HOST:PORT/debug/pprof/heap</code>. When auth is on (go tool pprof sends no Authorization header), fetch it first: <code>curl -H 'Authorization: Bearer TOKEN' -o heap.pb.gz http://HOST:PORT/debug/pprof/heap &amp;&amp; go tool pprof -top heap.pb.gz</code>.</p>
</body></html>
`;
}
