/**
 * Program sets are data: a spec names the embedded object, the programs with their attach points (required
 * or optional), the ring buffers with their pure decoders, and the constants. The generic loader
 * (./loader.ts) reads specs; program sets never call libbpf.
 */
import type { AttachTarget } from "../../ffi/types";

export interface ProgramSpec {
  /** Function name in the BPF object. */
  name: string;
  attach: AttachTarget;
  /** A required program that fails makes the whole set a permanent error; an optional one is reported attached:false. */
  required: boolean;
  /**
   * Loaded but not attached by the loader: the set's component attaches it itself, to targets found at run time
   * (uprobes on the libraries processes load); `attach` then only names the kind, for the feature check.
   */
  manual?: boolean;
}

/** Decodes one record; pure, over a DataView, offsets mirroring the C struct. Throws RangeError on short records. */
export type RecordDecoder<E> = (view: DataView, offset: number, length: number) => E;

export interface RingBufferSpec<E = unknown> {
  /** The BPF_MAP_TYPE_RINGBUF map; its size is agent.ebpf.ringbuf_size, or with `auto` autoSizeBytes. */
  map: string;
  /** Size with `ringbuf_size: auto` (rounded up to a power of two; default DEFAULT_AUTO_RINGBUF_BYTES): what the set's event rate needs. */
  autoSizeBytes?: number;
  /** The per-CPU array counting failed reservations (ffi/bpf/common.h SVC_LOST_MAP): `<map>_lost`. */
  lostMap: string;
  /**
   * The perf event array used instead on kernels without ring buffers (< 5.8), and the `const volatile`
   * flag that switches the BPF side to it. Without it the set needs ring buffers.
   */
  perfFallback?: { map: string; constant: string };
  decode: RecordDecoder<E>;
}

export interface ProgramSetSpec<E = unknown> {
  /** Set name: component `ebpf/<name>`. */
  name: string;
  /** Name of the embedded object (ffi/bpf/<object>.bpf.c). */
  object: string;
  programs: ProgramSpec[];
  ringBuffers: Array<RingBufferSpec<E>>;
  /** `const volatile` globals set before load. */
  constants?: Record<string, number | bigint>;
  /**
   * Initialised (not const) globals of .data set before load; the set's owner may change them while it runs
   * (LoadedSet.object.setVariables), e.g. limits a reload changes without a new set.
   */
  variables?: Record<string, number | bigint>;
  /** max_entries of maps other than ring buffers, set before load (configurable map sizes). */
  mapSizes?: Record<string, number>;
  /** Maps the kernel does not create (a kind this kernel lacks): a constant makes the verifier prune the code using them. */
  mapsLeftOut?: string[];
  /**
   * Maps that are one kernel map in every set of the process that declares them (same name and definition): the
   * first set loaded creates it, later ones (and reloads) reuse it.
   */
  sharedMaps?: string[];
  /**
   * Shared maps whose entries this set's programs add and remove as events come: emptied before its programs attach.
   * The map outlives the set (a reload, network tracing turned off then on, another agent in the same process): what
   * an earlier set recorded went stale once no set saw the events that remove it.
   */
  emptiedMaps?: string[];
}

/** The maps of the `network` and `tls` sets that are one kernel map: the agent's own endpoints (common.h) and the RED
 * counts, generations and configuration (red.h; read and configured by the network set's user space). */
export const EXCHANGE_SHARED_MAPS = ["svc_self_peers", "red_idx_a", "red_idx_b", "red_vals_a", "red_vals_b", "red_next", "red_paths", "red_overflow", "red_config", "red_moves"];

/** The maps of the `tls` set's socket call part (ffi/bpf/tls-socket.h), one kernel map in the `tls` set and the
 * `network` set where the network set's programs run that part (tlsSocketCallsInNetworkSet). */
export const TLS_SOCKET_SHARED_MAPS = ["active", "tls_conns", "tls_socks", "tls_tgids"];

/** Per program, after a load attempt: what the status view shows. */
export interface ProgramStatus {
  name: string;
  /** Attach kind (tracepoint, raw_tp, tp_btf, kprobe, uprobe, perf_event...). */
  type: string;
  attached: boolean;
  /** Kernel program id (0 when not loaded). */
  id: number;
  reason?: string;
}
