/**
 * Program set `process` (loaded by default): program starts, forks and ends from the sched tracepoints, feeding
 * the ProcessTable that collectors use for process.pid / process.executable.name / container.id.
 */
import type { ProgramSetSpec } from "../spec";
import { decodeProcessEvent, type ProcessEvent } from "./process-decoder";

export const PROCESS_SET: ProgramSetSpec<ProcessEvent> = {
  name: "process",
  object: "process",
  programs: [
    { name: "handle_exec", attach: { kind: "tracepoint", category: "sched", name: "sched_process_exec" }, required: true },
    { name: "handle_exit", attach: { kind: "tracepoint", category: "sched", name: "sched_process_exit" }, required: true },
    // Children forked without exec keep their parent's executable and container (needs kernel BTF; without it they are read from /proc when seen).
    { name: "handle_fork", attach: { kind: "tp_btf" }, required: false },
  ],
  ringBuffers: [{ map: "events", lostMap: "events_lost", perfFallback: { map: "events_perf", constant: "use_perfbuf" }, decode: decodeProcessEvent }],
};
