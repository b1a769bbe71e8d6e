/**
 * CPU profile of the agent's JavaScript: the inspector's Profiler domain (JavaScriptCore's sampling profiler under
 * Bun) runs for the requested seconds, and its call tree becomes a pprof profile with function names, files and
 * lines. One profile at a time per process: a second request while one runs is refused (ProfilerBusyError).
 */
import { Session } from "node:inspector";
import { PprofBuilder, type Frame } from "./pprof";

/** Microseconds between samples asked of the profiler. */
export const CPU_SAMPLING_INTERVAL_US = 1000;

/** A CPU profile is already being taken; carries when it ends. */
export class ProfilerBusyError extends Error {
  constructor(
    readonly what: string,
    readonly endsAt: Date,
  ) {
    super(`a ${what} is already being taken (until ${endsAt.toISOString()}); only one at a time`);
    this.name = "ProfilerBusyError";
  }
}

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
/** The inspector's Profiler.Profile. */
export interface InspectorProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

let busyUntil: Date | undefined;

/** Reserves the process' single profiling slot for `ms`; throws ProfilerBusyError when taken. Returns the release. */
export function reserveProfiler(what: string, ms: number): () => void {
  if (busyUntil) throw new ProfilerBusyError(what, busyUntil);
  const until = new Date(Date.now() + ms);
  busyUntil = until;
  return () => {
    if (busyUntil === until) busyUntil = undefined;
  };
}

/**
 * Interval the sampling thread is left at between profiles. JavaScriptCore's sampling thread never exits once
 * started: stopped, it keeps waking at the last interval it was given, and at the 1 ms of a profile that cost
 * ~1.8% of a core for the rest of the process' life (measured: 18-19 clock ticks per 10 s of an idle agent after
 * one GET /debug/pprof/profile). After each profile a start/stop at this interval parks it (0 ticks measured).
 */
export const PARKED_INTERVAL_US = 50_000;
/** Whether this process' sampling thread has been started (and parked) before. */
let parked = false;

/**
 * Samples the JavaScript for `seconds` (abortable) and returns the inspector's profile. A parked sampling thread
 * takes up to PARKED_INTERVAL_US to notice the profile's interval, so the window starts after that lead-in and the
 * samples taken before it are left out: the profile covers the requested seconds, all sampled at the interval.
 */
export async function sampleCpu(seconds: number, signal?: AbortSignal): Promise<InspectorProfile & { wallStartMs: number; wallMs: number }> {
  const leadInMs = parked ? PARKED_INTERVAL_US / 1000 + 5 : 0;
  const release = reserveProfiler("CPU profile", seconds * 1000 + leadInMs);
  const session = new Session();
  session.connect();
  const post = <T>(method: string, params: object = {}) =>
    new Promise<T>((resolve, reject) => session.post(method, params, (err: Error | null, result?: object) => (err ? reject(err) : resolve(result as T))));
  let started = false;
  try {
    await post("Profiler.enable");
    await post("Profiler.setSamplingInterval", { interval: CPU_SAMPLING_INTERVAL_US });
    await post("Profiler.start");
    started = true;
    const s0 = performance.now();
    if (leadInMs > 0) await Bun.sleep(leadInMs);
    const wallStartMs = Date.now();
    const t0 = performance.now();
    await new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      const timer = setTimeout(resolve, seconds * 1000);
      signal?.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
    });
    const { profile } = await post<{ profile: InspectorProfile }>("Profiler.stop");
    started = false;
    const wallMs = performance.now() - t0;
    return { ...withoutLeadIn(profile, (t0 - s0) * 1000), wallStartMs, wallMs };
  } finally {
    // Park the sampling thread (see PARKED_INTERVAL_US), whatever happened above.
    if (started) await post("Profiler.stop").catch(() => undefined);
    await post("Profiler.setSamplingInterval", { interval: PARKED_INTERVAL_US }).catch(() => undefined);
    if (await post("Profiler.start").then(() => true, () => false)) await post("Profiler.stop").catch(() => undefined);
    parked = true;
    await post("Profiler.disable").catch(() => undefined);
    session.disconnect();
    release();
  }
}

/** The profile without the samples taken in its first `leadInUs` microseconds; startTime moved to the window's start. */
export function withoutLeadIn(p: InspectorProfile, leadInUs: number): InspectorProfile {
  if (!(leadInUs > 0) || !p.samples || !p.timeDeltas) return p;
  const windowStart = p.startTime + leadInUs;
  const samples: number[] = [];
  const timeDeltas: number[] = [];
  let t = p.startTime;
  let last = windowStart;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i] ?? 0;
    if (t < windowStart) continue;
    samples.push(p.samples[i]!);
    timeDeltas.push(t - last);
    last = t;
  }
  return { ...p, startTime: windowStart, samples, timeDeltas };
}

/** Converts an inspector profile to pprof: sample types samples/count and cpu/nanoseconds (count x interval). */
export function cpuProfileToPprof(p: InspectorProfile & { wallStartMs?: number; wallMs?: number }, intervalUs = CPU_SAMPLING_INTERVAL_US): PprofBuilder {
  const parent = new Map<number, number>();
  const byId = new Map<number, ProfileNode>();
  for (const n of p.nodes) {
    byId.set(n.id, n);
    for (const c of n.children ?? []) parent.set(c, n.id);
  }
  const periodNs = intervalUs * 1000;
  const durationUs = p.wallMs !== undefined ? p.wallMs * 1000 : Math.max(0, p.endTime - p.startTime);
  const builder = new PprofBuilder({
    sampleTypes: [
      ["samples", "count"],
      ["cpu", "nanoseconds"],
    ],
    periodType: ["cpu", "nanoseconds"],
    period: periodNs,
    defaultSampleType: "cpu",
    timeNanos: BigInt(Math.round(p.wallStartMs ?? Date.now())) * 1_000_000n,
    durationNanos: BigInt(Math.round(durationUs)) * 1000n,
  });
  const counts = new Map<number, number>();
  for (const id of p.samples ?? []) counts.set(id, (counts.get(id) ?? 0) + 1);
  const stacks = new Map<number, Frame[]>();
  const stackOf = (id: number): Frame[] => {
    let s = stacks.get(id);
    if (s) return s;
    s = [];
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const node = byId.get(cur);
      if (!node || node.callFrame.functionName === "(root)") break;
      s.push(frameOf(node.callFrame));
    }
    if (s.length === 0) s.push({ name: "(root)" });
    stacks.set(id, s);
    return s;
  };
  for (const [id, n] of counts) builder.add(stackOf(id), [n, n * periodNs]);
  builder.comment(`JavaScript CPU samples every ${intervalUs} us from the inspector Profiler (JavaScriptCore sampling profiler); idle time is not sampled`);
  return builder;
}

function frameOf(cf: CallFrame): Frame {
  const line = cf.lineNumber >= 0 ? cf.lineNumber + 1 : 0;
  return { name: cf.functionName || "(anonymous)", file: cf.url || "(native)", line, startLine: line };
}
