/**
 * The generic loader: opens a program set's embedded object, sets its constants and ring buffer sizes, loads
 * it (retrying without an optional program the kernel rejected), attaches each program with the method of its
 * attach kind, and opens its ring (or perf) buffer readers. Program sets are specs (./spec.ts); this is the
 * only code that turns them into kernel objects, through the interfaces of ffi/types.ts.
 */
import { cpus } from "node:os";
import { LibbpfError, QuietLoadError } from "../../ffi/errors";
import type { BpfLinkApi, BpfMapApi, BpfObjectApi, BpfRuntime, RecordReader } from "../../ffi/types";
import type { FeatureProbes } from "./features";
import type { ProgramSetSpec, ProgramStatus, RecordDecoder } from "./spec";

const PAGE_BYTES = 4096;

export interface LoaderOptions {
  runtime: BpfRuntime;
  probes: FeatureProbes;
  /** The ELF bytes of an embedded object by name. */
  objectBytes(name: string): Promise<Uint8Array>;
  /**
   * Ring buffer size in bytes (a power of two), or undefined for `auto`: each ring's autoSizeBytes (else
   * DEFAULT_AUTO_RINGBUF_BYTES). Perf buffers get the same total spread over CPUs.
   */
  ringbufSizeBytes: number | undefined;
  /** Ring buffers usable (kernel >= 5.8); else the perf fallback of each ring buffer is used. */
  useRingbuf: boolean;
  /** Called with the verifier log of a program the kernel rejected. */
  onVerifierLog?(program: string, log: string): void;
  /** CPUs to size perf buffers for (default: this machine's). */
  cpuCount?: number;
  /**
   * Load without attaching: the set's programs run only once LoadedSet.attach() is called (a set replacing another
   * is verified while the one it replaces still runs).
   */
  deferAttach?: boolean;
}

/** One open reader of a loaded set. */
export interface ReaderBinding<E = unknown> {
  /** The map read (the ring buffer, or its perf fallback). */
  map: string;
  kind: "ringbuf" | "perfbuf";
  reader: RecordReader;
  /** The per-CPU lost counter (ring buffers). */
  lostMap: BpfMapApi | undefined;
  decode: RecordDecoder<E>;
  /** Bytes of the buffer (ring size, or per-CPU size times CPUs). */
  sizeBytes: number;
}

/** A set whose programs are loaded and attached (or wait for attach()). close() detaches and frees everything; idempotent. */
export class LoadedSet<E = unknown> {
  #closed = false;
  /** Attaches the programs of a set loaded with deferAttach; undefined once done (or when there was nothing to do). */
  #pending: (() => string | undefined) | undefined;

  constructor(
    readonly spec: ProgramSetSpec<E>,
    readonly object: BpfObjectApi,
    readonly links: BpfLinkApi[],
    readonly programs: ProgramStatus[],
    readonly readers: Array<ReaderBinding<E>>,
    pending?: () => string | undefined,
  ) {
    this.#pending = pending;
  }

  /**
   * Attaches the programs of a set loaded with deferAttach (nothing otherwise). Returns the reason when a required
   * program failed to attach: the set is closed then.
   */
  attach(): string | undefined {
    const pending = this.#pending;
    this.#pending = undefined;
    if (!pending || this.#closed) return undefined;
    const failed = pending();
    if (failed !== undefined) this.close();
    return failed;
  }

  /** Maps the kernel created, internal ones (.rodata, .bss) left out. */
  maps(): BpfMapApi[] {
    if (this.#closed) return [];
    return this.object.maps().filter((m) => !m.name.includes("."));
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const r of this.readers) r.reader.close();
    for (const l of this.links) l.close();
    this.object.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

export type LoadOutcome<E> =
  | { ok: true; set: LoadedSet<E> }
  | { ok: false; reason: string; programs: ProgramStatus[]; error: Error };

function reasonOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** A ring's size with `ringbuf_size: auto` when its spec says nothing. */
export const DEFAULT_AUTO_RINGBUF_BYTES = 1 << 20;

/** The size of ring `rb`: the configured one, else (auto) its own. */
export function ringSizeBytes(rb: { autoSizeBytes?: number }, configured: number | undefined): number {
  return configured ?? roundRingbufSize(rb.autoSizeBytes ?? DEFAULT_AUTO_RINGBUF_BYTES);
}

/** Rounds up to a power of two (at least one page). */
export function roundRingbufSize(bytes: number): number {
  let size = PAGE_BYTES;
  while (size < bytes) size *= 2;
  return size;
}

function perfPagesPerCpu(totalBytes: number, cpuCount: number): number {
  const perCpuPages = Math.max(1, Math.floor(totalBytes / Math.max(1, cpuCount) / PAGE_BYTES));
  return 2 ** Math.floor(Math.log2(perCpuPages));
}

/**
 * Loads and attaches a set. Never throws: a failure of the object or of a required program gives
 * `{ ok: false }` with every program's status; an optional program that fails is `attached: false` with
 * its reason and the others go on.
 */
export async function loadProgramSet<E>(spec: ProgramSetSpec<E>, options: LoaderOptions): Promise<LoadOutcome<E>> {
  const statuses = new Map<string, ProgramStatus>(spec.programs.map((p) => [p.name, { name: p.name, type: p.attach.kind, attached: false, id: 0 }]));
  const programs = () => [...statuses.values()];
  const fail = (reason: string, error: Error): LoadOutcome<E> => {
    for (const s of statuses.values()) if (!s.reason) s.reason = `not loaded: ${reason}`;
    for (const s of statuses.values()) {
      s.attached = false;
      s.id = 0;
    }
    return { ok: false, reason, programs: programs(), error };
  };
  const required = new Set(spec.programs.filter((p) => p.required).map((p) => p.name));
  const excluded = new Map<string, string>();
  for (const p of spec.programs) {
    const missing = options.probes.attachKind(p.attach.kind);
    if (!missing) continue;
    if (p.required) return fail(`required program ${p.name}: ${missing.message}`, missing);
    excluded.set(p.name, missing.message);
  }
  const needsRingbuf = spec.ringBuffers.find((r) => !options.useRingbuf && !r.perfFallback);
  if (needsRingbuf) {
    const e = options.probes.ringbuf() ?? new Error("ring buffers disabled");
    return fail(`ring buffer ${needsRingbuf.map} has no perf buffer fallback: ${e.message}`, e);
  }

  let bytes: Uint8Array;
  try {
    bytes = await options.objectBytes(spec.object);
  } catch (e) {
    return fail(`object ${spec.object}: ${reasonOf(e)}`, e as Error);
  }

  let object: BpfObjectApi | undefined;
  for (let attempt = 0; attempt <= spec.programs.length && !object; attempt++) {
    let candidate: BpfObjectApi;
    try {
      candidate = options.runtime.openObject(bytes, spec.object);
    } catch (e) {
      return fail(`opening ${spec.object}: ${reasonOf(e)}`, e as Error);
    }
    try {
      configure(candidate, spec, options, excluded);
      try {
        candidate.load({ quiet: true });
      } catch (e) {
        if (!(e instanceof QuietLoadError)) throw e;
        // The quiet load says nothing of why it failed: a fresh copy loads with libbpf's log on (and signals
        // as they come), which either tells the reason or, if a signal storm was the cause, may just work.
        candidate.close();
        candidate = options.runtime.openObject(bytes, spec.object);
        configure(candidate, spec, options, excluded);
        candidate.load();
      }
      object = candidate;
    } catch (e) {
      candidate.close();
      const blamed = e instanceof LibbpfError ? e.subject : undefined;
      if (e instanceof LibbpfError && e.verifierLog && blamed) options.onVerifierLog?.(blamed, e.verifierLog);
      if (blamed && statuses.has(blamed) && !required.has(blamed) && !excluded.has(blamed)) {
        excluded.set(blamed, `load failed: ${reasonOf(e)}`);
        continue;
      }
      const what = blamed && required.has(blamed) ? `required program ${blamed} failed to load` : `loading ${spec.object} failed`;
      if (blamed && statuses.has(blamed)) statuses.get(blamed)!.reason = reasonOf(e);
      return fail(`${what}: ${reasonOf(e)}`, e as Error);
    }
  }
  if (!object) return fail(`loading ${spec.object} failed after excluding optional programs`, new Error("load retries exhausted"));
  try {
    keepSharedMaps(object, spec.sharedMaps ?? []);
    for (const name of spec.emptiedMaps ?? []) emptyMap(object, name);
  } catch (e) {
    object.close();
    return fail(`preparing the shared maps of ${spec.object}: ${reasonOf(e)}`, e as Error);
  }

  const links: BpfLinkApi[] = [];
  const readers: Array<ReaderBinding<E>> = [];
  const abandon = (reason: string, error: Error): LoadOutcome<E> => {
    for (const r of readers) r.reader.close();
    for (const l of links) l.close();
    object.close();
    return fail(reason, error);
  };
  /** Attaches every program not excluded; the reason when a required one failed (the links made stay in `links`). */
  const attachAll = (): string | undefined => {
    for (const p of spec.programs) {
      const status = statuses.get(p.name)!;
      const why = excluded.get(p.name);
      if (why) {
        status.reason = why;
        continue;
      }
      const prog = object.program(p.name)!;
      if (p.manual) {
        status.id = prog.id();
        status.reason = "attached by its set to targets found at run time: none yet";
        continue;
      }
      try {
        status.id = prog.id();
        links.push(prog.attach(p.attach));
        status.attached = true;
        delete status.reason;
      } catch (e) {
        status.reason = reasonOf(e);
        if (p.required) {
          for (const s of statuses.values()) s.attached = false;
          return `required program ${p.name} failed to attach: ${reasonOf(e)}`;
        }
      }
    }
    return undefined;
  };
  if (!options.deferAttach) {
    const failed = attachAll();
    if (failed !== undefined) return abandon(failed, new Error(failed));
  } else {
    for (const p of spec.programs) {
      const status = statuses.get(p.name)!;
      status.reason = excluded.get(p.name) ?? "loaded, not attached yet";
      if (!excluded.has(p.name)) status.id = object.program(p.name)!.id();
    }
  }

  const cpuCount = options.cpuCount ?? cpus().length;
  for (const rb of spec.ringBuffers) {
    try {
      if (options.useRingbuf) {
        const map = object.map(rb.map)!;
        readers.push({ map: rb.map, kind: "ringbuf", reader: map.openReader(), lostMap: object.map(rb.lostMap), decode: rb.decode, sizeBytes: map.maxEntries });
      } else {
        const fb = rb.perfFallback!;
        const pages = perfPagesPerCpu(ringSizeBytes(rb, options.ringbufSizeBytes), cpuCount);
        const reader = object.map(fb.map)!.openReader({ perfPageCount: pages });
        readers.push({ map: fb.map, kind: "perfbuf", reader, lostMap: undefined, decode: rb.decode, sizeBytes: pages * PAGE_BYTES * cpuCount });
      }
    } catch (e) {
      return abandon(`opening reader of ${rb.map}: ${reasonOf(e)}`, e as Error);
    }
  }
  options.runtime.releaseFreedMemory?.();
  return { ok: true, set: new LoadedSet(spec, object, links, programs(), readers, options.deferAttach ? attachAll : undefined) };
}

/** The kernel maps of `sharedMaps` by name: a descriptor of each, kept for the life of the process. */
const sharedMapFds = new Map<string, number>();

/** Before load: the set's shared maps that exist already are reused. */
function reuseSharedMaps(object: BpfObjectApi, names: string[]): void {
  for (const name of names) {
    const fd = sharedMapFds.get(name);
    const map = object.map(name);
    if (fd !== undefined && map?.reuseFd) map.reuseFd(fd);
  }
}

/** After load: the shared maps this set created are kept for the sets loaded later. */
function keepSharedMaps(object: BpfObjectApi, names: string[]): void {
  for (const name of names) {
    const map = object.map(name);
    if (!sharedMapFds.has(name) && map?.keepFd) sharedMapFds.set(name, map.keepFd());
  }
}

/** Deletes every entry of a hash map of `object` (before its programs attach: nothing of this set adds meanwhile). */
function emptyMap(object: BpfObjectApi, name: string): void {
  const map = object.map(name);
  if (!map?.keys || !map.delete) return;
  for (const k of map.keys(map.maxEntries)) map.delete(k);
}

/** Autoload, constants and variables, buffer sizes, and which transport map the kernel creates. Throws on a spec that does not match the object. */
function configure<E>(object: BpfObjectApi, spec: ProgramSetSpec<E>, options: LoaderOptions, excluded: Map<string, string>): void {
  const wanted = new Set(spec.programs.map((p) => p.name));
  for (const prog of object.programs()) prog.setAutoload(wanted.has(prog.name) && !excluded.has(prog.name));
  for (const p of spec.programs) {
    if (!object.program(p.name)) throw new LibbpfError("bpf_object__find_program_by_name", 2, { subject: p.name, detail: `no program ${p.name} in ${spec.object}` });
  }
  const constants: Record<string, number | bigint> = { ...spec.constants };
  for (const rb of spec.ringBuffers) {
    const ring = object.map(rb.map);
    if (!ring) throw new LibbpfError("bpf_object__find_map_by_name", 2, { subject: rb.map, detail: `no map ${rb.map} in ${spec.object}` });
    if (rb.perfFallback) {
      constants[rb.perfFallback.constant] = options.useRingbuf ? 0 : 1;
      const perf = object.map(rb.perfFallback.map);
      if (!perf) throw new LibbpfError("bpf_object__find_map_by_name", 2, { subject: rb.perfFallback.map, detail: `no map ${rb.perfFallback.map} in ${spec.object}` });
      if (options.useRingbuf) perf.setMaxEntries(1);
    }
    // Below 5.8 the kernel cannot create the ring: it is left out (the verifier prunes the branch using it).
    if (options.useRingbuf) ring.setMaxEntries(ringSizeBytes(rb, options.ringbufSizeBytes));
    else ring.setAutocreate(false);
  }
  object.setConstants(constants);
  if (spec.variables && Object.keys(spec.variables).length > 0) {
    if (!object.setVariables) throw new LibbpfError("setVariables", 95, { subject: spec.object, detail: "this object cannot set .data globals" });
    object.setVariables(spec.variables);
  }
  for (const [name, size] of Object.entries(spec.mapSizes ?? {})) {
    const map = object.map(name);
    if (!map) throw new LibbpfError("bpf_object__find_map_by_name", 2, { subject: name, detail: `no map ${name} in ${spec.object}` });
    map.setMaxEntries(size);
  }
  for (const name of spec.mapsLeftOut ?? []) {
    const map = object.map(name);
    if (!map) throw new LibbpfError("bpf_object__find_map_by_name", 2, { subject: name, detail: `no map ${name} in ${spec.object}` });
    map.setAutocreate(false);
  }
  reuseSharedMaps(object, spec.sharedMaps ?? []);
}
