/**
 * The eBPF core of the agent: environment checks, program-set specs and the generic loader, ring and perf
 * buffer pumps, the `ebpf/<set>` components (readiness `ebpf`), the `ebpf` status view and ebpf_* metrics,
 * and the process table fed by the default `process` set. Native work goes through ffi/ only.
 *
 * The agent builds one EbpfCore and hands it to collectors as `ctx.ebpf`: other program sets (network, syscalls,
 * profiling) join by building an `EbpfSetComponent` over it, and label their telemetry with `ctx.ebpf.processes.forPid(pid)`.
 */
import type { Component } from "../lifecycle/component";
import { EbpfSetComponent } from "./component";
import type { EbpfCore, EbpfDeps } from "./core";
import { systemProbe } from "./environment";
import { PROCESS_SET } from "./sets/process";

export { EbpfCore, type EbpfDeps, type Prepared } from "./core";
export { EbpfSetComponent, type ProgramSetDefinition } from "./component";
export { loadProgramSet, LoadedSet, roundRingbufSize, type LoadOutcome, type LoaderOptions, type ReaderBinding } from "./loader";
export { ProcessTable, containerIdFromCgroup, type ProcessInfo } from "./process-table";
export { UnsupportedFeatureError, FeatureProbes } from "./features";
export type { ProgramSetSpec, ProgramSpec, RingBufferSpec, ProgramStatus } from "./spec";
export type { ProcessEvent } from "./sets/process-decoder";

/** The real native side: libbpf through ffi/ (imported lazily so that nothing native loads until eBPF starts). */
export const NATIVE_DEPS: EbpfDeps = {
  async openRuntime(env) {
    return (await import("../../ffi")).openBpfRuntime(env);
  },
  async objectBytes(name) {
    return (await import("../../ffi")).embeddedObject(name);
  },
  environment() {
    const ffi = require("../../ffi") as typeof import("../../ffi");
    return systemProbe({ mountFs: ffi.mountFs, memlockLimit: ffi.memlockLimit, raiseMemlock: ffi.raiseMemlock });
  },
  openRingWaiter(timeoutMs) {
    const ffi = require("../../ffi") as typeof import("../../ffi");
    return new ffi.RingWaiter(timeoutMs);
  },
};

/** The eBPF components: the `process` set (default). */
export function createEbpfComponents(core: EbpfCore): Component[] {
  return [
    new EbpfSetComponent(core, {
      spec: PROCESS_SET,
      onEvent: (e) => core.processes.apply(e),
      onAttached: () => core.processes.seed(),
    }),
  ];
}
