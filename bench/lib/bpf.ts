/** Program sets for benchmarks that load BPF themselves (root, after a build): through the agent's own loader. */
import { readFileSync } from "node:fs";
import type { BpfRuntime } from "../../ffi";
import { FeatureProbes } from "../../src/ebpf/features";
import { loadProgramSet, type LoadedSet } from "../../src/ebpf/loader";
import type { ProgramSetSpec } from "../../src/ebpf/spec";

/** Loads and attaches `spec` from the object file `objectPath` with ring buffers of `ringbufSizeBytes`; throws what the loader refused. */
export async function loadSetFromFile<E>(runtime: BpfRuntime, spec: ProgramSetSpec<E>, objectPath: string, ringbufSizeBytes: number): Promise<LoadedSet<E>> {
  const out = await loadProgramSet(spec, {
    runtime,
    probes: new FeatureProbes(runtime),
    objectBytes: async () => new Uint8Array(readFileSync(objectPath)),
    ringbufSizeBytes,
    useRingbuf: true,
  });
  if (!out.ok) throw out.error;
  return out.set;
}
