/**
 * The interfaces the rest of the agent programs against (src/ebpf never sees a pointer). The real
 * classes in this folder implement them over libbpf; unit tests implement them with fakes.
 */

/** Where and how a program attaches. `perf_event` opens one software cpu-clock event per online CPU. */
export type AttachTarget =
  | { kind: "tracepoint"; category: string; name: string }
  | { kind: "raw_tp"; name: string }
  | { kind: "tp_btf" }
  | { kind: "kprobe" | "kretprobe"; func: string }
  /** `offset`: a file offset in `binary` to probe instead of the function `func` (an instruction the symbol table does not name). */
  | { kind: "uprobe" | "uretprobe"; binary: string; func: string; offset?: number; pid?: number }
  | { kind: "perf_event"; event: "cpu-clock"; frequencyHz: number };

export type AttachKind = AttachTarget["kind"];

/** Which libbpf the process uses and why. */
export interface LibbpfInfo {
  source: "system" | "embedded" | "override";
  /** Absolute path of the libbpf.so.1 loaded. */
  path: string;
  version: string;
}

/** Called with each record of a ring or perf buffer; `view` is only valid during the call (copy what you keep). */
export type RecordHandler = (view: DataView, offset: number, length: number) => void;

/** Decodes one record (valid only during the call) into a value; throws (RangeError by convention) when it cannot. */
export type RecordDecoderFn<E> = (view: DataView, offset: number, length: number) => E;

/** A reader of records the kernel writes. `consume` never blocks. Closing is idempotent; a closed reader reads nothing. */
export interface RecordReader extends Disposable {
  readonly kind: "ringbuf" | "perfbuf";
  /** Reads every record available now (at most `maxRecords`), calling `onRecord` for each; returns how many were read. */
  consume(onRecord: RecordHandler, maxRecords?: number): number;
  /**
   * The hot path: reads every record available now (at most `maxRecords`) and hands each to `sink(decode(view,
   * offset, length))`, with no wrapper per record. A record whose decode or sink throws is consumed (never read
   * again) and its error given to `onError`; reading goes on. Returns the records handed out, failed ones included.
   */
  consumeDecoded<E>(decode: RecordDecoderFn<E>, sink: (event: E) => void, maxRecords: number, onError: (error: unknown) => void): number;
  /** Bytes written by producers and not read yet, when the transport can tell (ring buffers). */
  pendingBytes?(): number;
  /** A file descriptor epoll reports readable while records wait (a ring buffer's map fd), when the transport has one. */
  readonly pollFd?: number;
  /** Records the kernel reported lost (perf buffer lost samples); ring buffers count losses in a BPF map instead. */
  readonly lostReported: number;
  close(): void;
}

export interface BpfLinkApi extends Disposable {
  /**
   * Detaches (destroys every underlying link). Idempotent. Where the kernel's teardown runs on another thread
   * (uprobes), returns a promise that settles when it has ended: the probe fires until then.
   */
  close(): void | Promise<void>;
}

export interface BpfProgramApi {
  readonly name: string;
  readonly sectionName: string;
  /** libbpf's name of the program type (tracepoint, raw_tracepoint, kprobe, perf_event, tracing...). */
  readonly typeName: string;
  /** Whether the program will be loaded by the object's load(); only before load. */
  setAutoload(on: boolean): void;
  readonly autoload: boolean;
  /** Kernel program id after load (0 when not loaded). */
  id(): number;
  /** Attaches; throws LibbpfError (e.g. ENOENT when the kernel has no such attach point). */
  attach(target: AttachTarget): BpfLinkApi;
}

export interface EntryCounter {
  /** Iterates at most `maxKeys` more keys; true when done (then `count` is final). */
  step(maxKeys: number): boolean;
  readonly count: number;
}

export interface BpfMapApi {
  readonly name: string;
  /** libbpf's name of the map type (hash, array, ringbuf, percpu_array, perf_event_array...). */
  readonly typeName: string;
  readonly maxEntries: number;
  /** Before load only. */
  setMaxEntries(n: number): void;
  /** Before load only: false keeps the kernel from creating the map (unused transport). */
  setAutocreate(on: boolean): void;
  /** Counts keys by iterating (at most `limit`) in one go; arrays answer their max_entries without iterating. */
  countEntries(limit: number): number;
  /**
   * An incremental count for callers that must not block (hash maps cost ~2-3 µs per key here): each
   * `step(maxKeys)` iterates at most `maxKeys` keys and returns true once the count is final. If the key the
   * iteration stopped at was deleted meanwhile, the count restarts.
   */
  entryCounter(limit: number): EntryCounter;
  /** Sum over CPUs of the u64 value at `key` of a per-CPU array (0 when absent). */
  sumPerCpuU64(key: number): bigint;
  /** Value at a u32 key of an array or hash map (per-CPU maps: every possible CPU's value, each 8-aligned), or undefined. */
  lookupU32Key(key: number): Uint8Array | undefined;
  /**
   * A reader over this map: a ring buffer (read from the mmapped ring, or with `mechanism: "libbpf-callback"`
   * through ring_buffer__consume and a JSCallback, kept for comparison) or a perf event array
   * (`perfPageCount` pages per CPU).
   */
  openReader(options?: { perfPageCount?: number; mechanism?: "mmap" | "libbpf-callback" }): RecordReader;
  /**
   * Shared maps (optional): `keepFd` after load gives a descriptor of the kernel map of its own (kept until the
   * process exits); `reuseFd` before load makes this map that one (a map shared between objects).
   */
  keepFd?(): number;
  reuseFd?(fd: number): void;
  /** Value at a key given as raw bytes (key_size long), or undefined when absent. Added for the profiler (optional). */
  lookup?(key: Uint8Array): Uint8Array | undefined;
  /** Up to `limit` keys of a hash map, as raw bytes, in the kernel's iteration order. Added for the profiler (optional). */
  keys?(limit: number): Uint8Array[];
  /** Deletes a key; false when it was absent. Added for the profiler (optional). */
  delete?(key: Uint8Array): boolean;
  /** Writes the value at a u32 key of an array map (BPF_ANY); throws LibbpfError. Optional (the memory gate). */
  updateU32Key?(key: number, value: Uint8Array): void;
  /**
   * Takes (looks up and deletes) up to `limit` entries of a hash map in a few batch calls
   * (bpf_map_lookup_and_delete_batch): keys and values packed back to back (key_size and value_size each; a
   * per-CPU map's value is every possible CPU's value, each rounded up to 8 bytes).
   * The buffers are reused by the next call. Undefined when the kernel lacks batch operations
   * (EINVAL/ENOTSUPP): use keys/lookup/delete. Optional.
   */
  takeBatch?(limit: number): { count: number; keys: Uint8Array; values: Uint8Array } | undefined;
  /**
   * The values at keys 0 to `count` - 1 of an array map, back to back, in one batch call (bpf_map_lookup_batch; a
   * per-CPU map's value is every possible CPU's value, each rounded up to 8 bytes). Undefined when the kernel lacks
   * batch operations (EINVAL/ENOTSUPP): use lookupU32Key. Optional.
   */
  readArrayBatch?(count: number): Uint8Array | undefined;
  /** Writes `values` (readArrayBatch's layout) at keys 0 to `count` - 1 of an array map in one batch call; false without batch operations. Optional. */
  writeArrayBatch?(count: number, values: Uint8Array): boolean;
}

export interface BpfObjectApi extends Disposable {
  readonly name: string;
  programs(): BpfProgramApi[];
  maps(): BpfMapApi[];
  program(name: string): BpfProgramApi | undefined;
  map(name: string): BpfMapApi | undefined;
  /** Names and sizes of the `const volatile` globals in .rodata. */
  constantNames(): string[];
  /** Sets `const volatile` globals by name (before load); throws on an unknown name or a size mismatch. */
  setConstants(values: Record<string, number | bigint>): void;
  /**
   * Sets globals of .data (initialised, not const) by name: before load their initial values, after load the values
   * the running programs read (the section is rewritten whole; nothing in it may be written by the programs).
   * Throws on an unknown name or a size mismatch. Optional: fakes may leave it out.
   */
  setVariables?(values: Record<string, number | bigint>): void;
  /**
   * Loads every autoload program and creates the maps. On failure throws LibbpfError with `subject` = the program
   * libbpf blamed (when it said) and its verifier log. `quiet`: libbpf logs nothing and every signal waits until
   * the load is done (the verifier gives up with EAGAIN while a signal is pending, and a process under a sampling
   * profiler or a burst of signals gets one every few milliseconds); such a failure throws QuietLoadError, which
   * carries no log, so the caller loads a fresh object again without `quiet` to learn why. Without effect while
   * libbpf's log goes to a sink (a failure then throws the usual LibbpfError).
   */
  load(options?: { quiet?: boolean }): void;
  /** Closes maps and programs (links must be closed first). Idempotent. */
  close(): void;
}

/** The native library: opens objects and answers feature probes. */
export interface BpfRuntime {
  readonly info: LibbpfInfo;
  /** Opens an object from its ELF bytes (kept alive by the object). */
  openObject(bytes: Uint8Array, name: string): BpfObjectApi;
  /** Whether the kernel can create a map of this libbpf type name (e.g. "ringbuf"). */
  probeMapType(typeName: string): boolean;
  /**
   * Hands the native heap's free pages back to the system. libbpf parses the kernel's BTF (several MB) to load and
   * attach a set, and frees it; the C allocator keeps those pages resident unless asked.
   */
  releaseFreedMemory?(): void;
  /** Routes libbpf's own log lines to `fn` (undefined: warnings only are captured for errors). */
  setLogSink(fn: ((level: "warn" | "info" | "debug", line: string) => void) | undefined): void;
}
