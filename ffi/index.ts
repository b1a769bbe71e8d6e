/**
 * The native layer of the agent: libbpf (and the few libc calls eBPF needs) through bun:ffi, behind typed
 * wrappers and interfaces. Nothing outside ffi/ touches a pointer; src/ebpf programs against ./types.
 * BPF C sources live in ./bpf and are compiled by the build (ffi/bpf/generate.ts).
 */
import { loadNative } from "./libbpf";
import { LibbpfRuntime } from "./object";
import type { BpfRuntime } from "./types";

export * from "./types";
export { LibbpfError, LibbpfUnavailableError, QuietLoadError, errnoName } from "./errors";
export { memlockLimit, mountFs, raiseMemlock } from "./system";
export { LibbpfRingBufferReader, RingBufferReader } from "./ring-buffer";
export { RingWaiter, type ReadinessWait } from "./ring-wait";
export { parseLoadFailure } from "./object";

let runtime: LibbpfRuntime | undefined;

/**
 * Loads libbpf (system >= 1.1, else the embedded copy; SVC_LIBBPF_PATH overrides) and returns the runtime.
 * Process-wide: the first call decides which libbpf; later calls return the same runtime.
 */
export async function openBpfRuntime(env: Record<string, string | undefined>): Promise<BpfRuntime> {
  if (runtime) return runtime;
  const native = await loadNative({ env, embedded: async () => (await import("./libs")).EMBEDDED_LIBS });
  runtime = new LibbpfRuntime(native);
  return runtime;
}

/** The bytes of an object embedded in the binary (built by ffi/bpf/generate.ts), by program set name. */
export async function embeddedObject(name: string): Promise<Uint8Array> {
  const { EMBEDDED_OBJECTS } = await import("./bpf/objects");
  const path = EMBEDDED_OBJECTS[name];
  if (!path) throw new Error(`no embedded BPF object named ${name}`);
  return await Bun.file(path).bytes();
}
