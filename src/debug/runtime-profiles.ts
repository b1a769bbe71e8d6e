/**
 * The profiles built from what the agent tracks itself: goroutine (live tasks and operations), threadcreate
 * (the process' OS threads), block (event-loop blocks and the operations that ran in them) and mutex (waits for
 * the agent's locks). Each returns a PprofBuilder; goroutine also renders Go's text forms (?debug=1, ?debug=2).
 */
import { readdirSync, readFileSync } from "node:fs";
import type { Mutex } from "../lifecycle/mutex";
import type { TaskInfo, TaskRegistry } from "../telemetry/tasks";
import { parseStack, PprofBuilder, type Frame } from "./pprof";
import { BLOCK_THRESHOLD_MS, type DebugRuntime } from "./runtime";

const MAIN_LOOP: Frame = { name: "main event loop", file: "svc-agent" };

function taskStack(t: Pick<TaskInfo, "name" | "kind" | "stack">): Frame[] {
  return [{ name: t.name, file: `svc-agent ${t.kind}` }, ...parseStack(t.stack)];
}

export function goroutineProfile(tasks: TaskRegistry): PprofBuilder {
  const b = new PprofBuilder({ sampleTypes: [["goroutine", "count"]], periodType: ["goroutine", "count"], period: 1 });
  const now = Date.now();
  b.add([MAIN_LOOP], [1], { kind: "event loop" });
  for (const t of tasks.list()) b.add(taskStack(t), [1], { kind: t.kind, age_ms: now - t.startedAt, id: t.id });
  b.comment(tasks.captureStacks ? "stacks are where each task or operation was started" : "creation stacks are captured in debug mode only; none for units started before it");
  return b;
}

/** Go's `?debug=1` form: counts per distinct stack. */
export function goroutineCountsText(tasks: TaskRegistry): string {
  const groups = new Map<string, { n: number; t: TaskInfo | undefined }>();
  groups.set("main event loop", { n: 1, t: undefined });
  for (const t of tasks.list()) {
    const key = `${t.kind}\u0000${t.name}\u0000${t.stack ?? ""}`;
    const g = groups.get(key) ?? { n: 0, t };
    g.n++;
    groups.set(key, g);
  }
  const out = [`goroutine profile: total ${tasks.count()}`];
  for (const { n, t } of [...groups.values()].sort((a, b) => b.n - a.n)) {
    out.push(`${n} @ ${t ? t.kind : "event loop"}`);
    out.push(`#\t${t ? t.name : "main event loop"}`);
    for (const f of parseStack(t?.stack)) out.push(`#\t${f.name}\t${f.file ?? ""}:${f.line ?? 0}`);
    out.push("");
  }
  return out.join("\n") + "\n";
}

/** Go's `?debug=2` form: every unit with its full stack. */
export function goroutineStacksText(tasks: TaskRegistry): string {
  const now = Date.now();
  const out = ["goroutine 0 [running]:", "main event loop", ""];
  for (const t of tasks.list()) {
    const secs = Math.floor((now - t.startedAt) / 1000);
    out.push(`goroutine ${t.id} [${t.kind}, ${secs} seconds]:`);
    out.push(t.name);
    if (t.stack) for (const line of t.stack.split("\n")) out.push(`\t${line.trim()}`);
    else out.push("\t(creation stack not captured: started before debug mode)");
    out.push("");
  }
  return out.join("\n");
}

export function threadcreateProfile(): PprofBuilder {
  const b = new PprofBuilder({ sampleTypes: [["threadcreate", "count"]], periodType: ["threadcreate", "count"], period: 1 });
  let tids: string[] = [];
  try {
    tids = readdirSync("/proc/self/task");
  } catch (e) {
    b.comment(`cannot read /proc/self/task: ${(e as Error).message}`);
  }
  for (const tid of tids) {
    let comm = "(unknown)";
    try {
      comm = readFileSync(`/proc/self/task/${tid}/comm`, "utf8").trim();
    } catch {
      // the thread ended between listing and reading
      continue;
    }
    b.add([{ name: comm, file: "/proc/self/task" }], [1], { tid: Number(tid) });
  }
  b.comment(`${b.sampleCount} OS threads of process ${process.pid} from /proc/self/task (JavaScript runs on the first; the others are the runtime's)`);
  return b;
}

/** Go's layout of contention profiles (block, mutex): count and delay per stack, delay shown by default. */
function contentionProfile(): PprofBuilder {
  return new PprofBuilder({
    sampleTypes: [
      ["contentions", "count"],
      ["delay", "nanoseconds"],
    ],
    periodType: ["contentions", "count"],
    period: 1,
    defaultSampleType: "delay",
  });
}

export function blockProfile(runtime: DebugRuntime): PprofBuilder {
  const b = contentionProfile();
  for (const block of runtime.blocks()) {
    const delayNs = block.delayMs * 1e6;
    if (block.operations.length === 0) {
      b.add([{ name: "(event loop blocked: no tracked operation ran; timers, I/O callbacks or GC)" }, MAIN_LOOP], [1, delayNs]);
      continue;
    }
    const share = delayNs / block.operations.length;
    for (const op of block.operations) b.add([...taskStack({ ...op, kind: "operation" }), MAIN_LOOP], [1, share]);
  }
  const h = runtime.loopDelay();
  if (h) {
    const ms = (ns: number) => (ns / 1e6).toFixed(2);
    b.comment(
      `event-loop delay since ${new Date(h.sinceMs).toISOString()} (perf_hooks.monitorEventLoopDelay, ${h.count} samples): min ${ms(h.min)} ms, mean ${ms(h.mean)} ms, p50 ${ms(h.p50)} ms, p99 ${ms(h.p99)} ms, max ${ms(h.max)} ms`,
    );
  } else b.comment(runtime.enabled ? "event-loop delay histogram: no samples yet" : "debug mode is off: the event loop is not being watched");
  b.comment(`samples: each time the event loop was blocked ${BLOCK_THRESHOLD_MS} ms or more, its delay split evenly across the operations running then`);
  return b;
}

export function mutexProfile(locks: readonly Mutex[]): PprofBuilder {
  const b = contentionProfile();
  for (const lock of locks) {
    if (lock.contentions > 0 || lock.waitedMs > 0)
      b.add([{ name: `${lock.name} lock wait`, file: "src/lifecycle/mutex.ts" }, { name: "Mutex.run", file: "src/lifecycle/mutex.ts" }], [lock.contentions, lock.waitedMs * 1e6]);
    b.comment(`${lock.name} lock: ${lock.contentions} contended acquisitions, ${lock.waitedMs.toFixed(3)} ms waited in total`);
  }
  if (locks.length === 0) b.comment("no lock of the agent was given to the profile");
  b.comment("queue hand-offs: the export queues are non-blocking (submit drops instead of waiting), so there are no hand-off waits to report");
  return b;
}
