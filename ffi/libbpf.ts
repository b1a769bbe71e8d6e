/**
 * The one door to native code: the only `dlopen` calls of the agent and the whole symbol table
 * (libbpf, its dependencies, libc), each symbol with its C signature and error convention.
 *
 * Which libbpf: `SVC_LIBBPF_PATH` when set; else the system's libbpf.so.1 when present and >= 1.1;
 * else the copy embedded in the binary (with libelf and libz), loaded from memory (memfd_create, opened as
 * /proc/self/fd/N: works where /tmp is noexec or read-only), or, when that fails, extracted to a private
 * directory that is removed again once the libraries are mapped. Dependencies are loaded first, so the
 * dynamic linker satisfies libbpf's DT_NEEDED entries by soname with them.
 *
 * Error conventions (libbpf 1.x): int functions return a negative errno; pointer functions return NULL
 * and set errno, which `lastErrno()` reads; call it in the same synchronous turn as the failing call.
 */
import { findLibrary, librarySearchDirs } from "./library-path";
import { dlopen, FFIType, ptr, read, type Pointer } from "bun:ffi";
import { closeSync, existsSync, mkdtempSync, realpathSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LibbpfUnavailableError } from "./errors";
import type { LibbpfInfo } from "./types";

const MFD_CLOEXEC = 1;
const MIN_SYSTEM_MAJOR = 1;
const MIN_SYSTEM_MINOR = 1;
const SYSTEM_LIB_DIRS = ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/local/lib", "/usr/lib", "/lib"];
const usize = FFIType.u64;
const { ptr: P, i32, u32, u64, i64, bool, cstring, void: VOID, function: FN, i64_fast } = FFIType;

const LIBBPF_SYMBOLS = {
  /** __u32 libbpf_major_version(void); */
  libbpf_major_version: { args: [], returns: u32 },
  /** __u32 libbpf_minor_version(void); */
  libbpf_minor_version: { args: [], returns: u32 },
  /** libbpf_print_fn_t libbpf_set_print(libbpf_print_fn_t fn); returns the previous callback. */
  libbpf_set_print: { args: [P], returns: P },
  /** int libbpf_num_possible_cpus(void); negative errno on error. */
  libbpf_num_possible_cpus: { args: [], returns: i32 },
  /** int libbpf_probe_bpf_map_type(enum bpf_map_type, const void *opts); 1 yes, 0 no, <0 errno. */
  libbpf_probe_bpf_map_type: { args: [u32, P], returns: i32 },
  /** const char *libbpf_bpf_map_type_str(enum bpf_map_type t); NULL when unknown. */
  libbpf_bpf_map_type_str: { args: [u32], returns: cstring },
  /** const char *libbpf_bpf_prog_type_str(enum bpf_prog_type t); NULL when unknown. */
  libbpf_bpf_prog_type_str: { args: [u32], returns: cstring },

  /** struct bpf_object *bpf_object__open_mem(const void *buf, size_t sz, const struct bpf_object_open_opts *opts); NULL+errno. */
  bpf_object__open_mem: { args: [P, usize, P], returns: P },
  /** int bpf_object__load(struct bpf_object *obj); -errno. */
  bpf_object__load: { args: [P], returns: i32 },
  /** void bpf_object__close(struct bpf_object *obj); */
  bpf_object__close: { args: [P], returns: VOID },
  /** struct bpf_program *bpf_object__next_program(const struct bpf_object *obj, struct bpf_program *prev); NULL at end. */
  bpf_object__next_program: { args: [P, P], returns: P },
  /** struct bpf_map *bpf_object__next_map(const struct bpf_object *obj, const struct bpf_map *prev); NULL at end. */
  bpf_object__next_map: { args: [P, P], returns: P },
  /** struct btf *bpf_object__btf(const struct bpf_object *obj); NULL when the object has no BTF. */
  bpf_object__btf: { args: [P], returns: P },

  /** __s32 btf__find_by_name_kind(const struct btf *btf, const char *name, __u32 kind); -ENOENT when absent. */
  btf__find_by_name_kind: { args: [P, P, u32], returns: i32 },
  /** const struct btf_type *btf__type_by_id(const struct btf *btf, __u32 id); NULL when out of range. */
  btf__type_by_id: { args: [P, u32], returns: P },
  /** const char *btf__name_by_offset(const struct btf *btf, __u32 offset); */
  btf__name_by_offset: { args: [P, u32], returns: cstring },

  /** const char *bpf_program__name(const struct bpf_program *prog); */
  bpf_program__name: { args: [P], returns: cstring },
  /** const char *bpf_program__section_name(const struct bpf_program *prog); */
  bpf_program__section_name: { args: [P], returns: cstring },
  /** enum bpf_prog_type bpf_program__type(const struct bpf_program *prog); */
  bpf_program__type: { args: [P], returns: u32 },
  /** int bpf_program__fd(const struct bpf_program *prog); -errno when not loaded. */
  bpf_program__fd: { args: [P], returns: i32 },
  /** bool bpf_program__autoload(const struct bpf_program *prog); */
  bpf_program__autoload: { args: [P], returns: bool },
  /** int bpf_program__set_autoload(struct bpf_program *prog, bool autoload); -errno after load. */
  bpf_program__set_autoload: { args: [P, bool], returns: i32 },
  /** struct bpf_link *bpf_program__attach_tracepoint(prog, const char *category, const char *name); NULL+errno. */
  bpf_program__attach_tracepoint: { args: [P, P, P], returns: P },
  /** struct bpf_link *bpf_program__attach_raw_tracepoint(prog, const char *tp_name); NULL+errno. */
  bpf_program__attach_raw_tracepoint: { args: [P, P], returns: P },
  /** struct bpf_link *bpf_program__attach_trace(prog); tp_btf/fentry/fexit, target from the section; NULL+errno. */
  bpf_program__attach_trace: { args: [P], returns: P },
  /** struct bpf_link *bpf_program__attach_kprobe(prog, bool retprobe, const char *func_name); NULL+errno. */
  bpf_program__attach_kprobe: { args: [P, bool, P], returns: P },
  /** struct bpf_link *bpf_program__attach_uprobe_opts(prog, pid_t pid, const char *binary_path, size_t func_offset, const struct bpf_uprobe_opts *opts); NULL+errno. */
  bpf_program__attach_uprobe_opts: { args: [P, i32, P, usize, P], returns: P },
  /** struct bpf_link *bpf_program__attach_perf_event(prog, int pfd); NULL+errno; on success the link owns pfd. */
  bpf_program__attach_perf_event: { args: [P, i32], returns: P },
  /** int bpf_link__destroy(struct bpf_link *link); -errno (the link is freed anyway). */
  bpf_link__destroy: { args: [P], returns: i32 },
  /** int bpf_link__fd(const struct bpf_link *link); the link's file descriptor. */
  bpf_link__fd: { args: [P], returns: i32 },

  /** const char *bpf_map__name(const struct bpf_map *map); */
  bpf_map__name: { args: [P], returns: cstring },
  /** enum bpf_map_type bpf_map__type(const struct bpf_map *map); */
  bpf_map__type: { args: [P], returns: u32 },
  /** __u32 bpf_map__max_entries(const struct bpf_map *map); */
  bpf_map__max_entries: { args: [P], returns: u32 },
  /** int bpf_map__set_max_entries(struct bpf_map *map, __u32 max_entries); -errno after load. */
  bpf_map__set_max_entries: { args: [P, u32], returns: i32 },
  /** int bpf_map__set_autocreate(struct bpf_map *map, bool autocreate); -errno after load. */
  bpf_map__set_autocreate: { args: [P, bool], returns: i32 },
  /** __u32 bpf_map__key_size(const struct bpf_map *map); */
  bpf_map__key_size: { args: [P], returns: u32 },
  /** __u32 bpf_map__value_size(const struct bpf_map *map); */
  bpf_map__value_size: { args: [P], returns: u32 },
  /** int bpf_map__fd(const struct bpf_map *map); -errno when not created. */
  bpf_map__fd: { args: [P], returns: i32 },
  /** int bpf_map__reuse_fd(struct bpf_map *map, int fd); before load: the map is the one of `fd` (dup'ed); -errno. */
  bpf_map__reuse_fd: { args: [P, i32], returns: i32 },
  /** const void *bpf_map__initial_value(struct bpf_map *map, size_t *psize); writable before load; NULL when none. */
  bpf_map__initial_value: { args: [P, P], returns: P },

  /** int bpf_map_get_next_key(int fd, const void *key, void *next_key); -ENOENT after the last key. */
  bpf_map_get_next_key: { args: [i32, P, P], returns: i32 },
  /** int bpf_map_lookup_elem(int fd, const void *key, void *value); -ENOENT when absent. */
  bpf_map_lookup_elem: { args: [i32, P, P], returns: i32 },
  /** int bpf_map_update_elem(int fd, const void *key, const void *value, __u64 flags); -errno (E2BIG: full). */
  bpf_map_update_elem: { args: [i32, P, P, u64], returns: i32 },
  /** int bpf_map_delete_elem(int fd, const void *key); -ENOENT when absent. */
  bpf_map_delete_elem: { args: [i32, P], returns: i32 },
  /** int bpf_map_lookup_and_delete_batch(int fd, void *in_batch, void *out_batch, void *keys, void *values, __u32 *count, opts); -ENOENT at the end. */
  bpf_map_lookup_and_delete_batch: { args: [i32, P, P, P, P, P, P], returns: i32 },
  /** int bpf_map_lookup_batch(int fd, void *in_batch, void *out_batch, void *keys, void *values, __u32 *count, opts); -ENOENT at the end. */
  bpf_map_lookup_batch: { args: [i32, P, P, P, P, P, P], returns: i32 },
  /** int bpf_map_update_batch(int fd, const void *keys, const void *values, __u32 *count, opts); -errno. */
  bpf_map_update_batch: { args: [i32, P, P, P, P], returns: i32 },
  /** int bpf_obj_get_info_by_fd(int bpf_fd, void *info, __u32 *info_len); -errno. */
  bpf_obj_get_info_by_fd: { args: [i32, P, P], returns: i32 },

  /** struct perf_buffer *perf_buffer__new(int map_fd, size_t page_cnt, sample_cb, lost_cb, void *ctx, const struct perf_buffer_opts *opts); NULL+errno. */
  perf_buffer__new: { args: [i32, usize, FN, FN, P, P], returns: P },
  /** int perf_buffer__consume(struct perf_buffer *pb); reads every CPU's buffer without waiting; -errno. */
  perf_buffer__consume: { args: [P], returns: i32 },
  /** void perf_buffer__free(struct perf_buffer *pb); */
  perf_buffer__free: { args: [P], returns: VOID },
  /** struct ring_buffer *ring_buffer__new(int map_fd, ring_buffer_sample_fn sample_cb, void *ctx, const struct ring_buffer_opts *opts); NULL+errno. */
  ring_buffer__new: { args: [i32, FN, P, P], returns: P },
  /** int ring_buffer__consume(struct ring_buffer *rb); records consumed or -errno. */
  ring_buffer__consume: { args: [P], returns: i32 },
  /** void ring_buffer__free(struct ring_buffer *rb); */
  ring_buffer__free: { args: [P], returns: VOID },
} as const;

const LIBC_SYMBOLS = {
  /** int *__errno_location(void); the calling thread's errno. */
  __errno_location: { args: [], returns: P },
  /** int vsnprintf(char *str, size_t size, const char *format, va_list ap); formats libbpf's log lines. */
  vsnprintf: { args: [P, usize, P, P], returns: i32 },
  /** void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset); MAP_FAILED (-1)+errno. */
  mmap: { args: [P, usize, i32, i32, i32, i64], returns: i64_fast },
  /** int munmap(void *addr, size_t length); -1+errno. */
  munmap: { args: [P, usize], returns: i32 },
  /** int mount(const char *source, const char *target, const char *fstype, unsigned long flags, const void *data); -1+errno. */
  mount: { args: [P, P, P, u64, P], returns: i32 },
  /** int getrlimit(int resource, struct rlimit *rlim); -1+errno. */
  getrlimit: { args: [i32, P], returns: i32 },
  /** int setrlimit(int resource, const struct rlimit *rlim); -1+errno. */
  setrlimit: { args: [i32, P], returns: i32 },
  /** long syscall(long number, ...); used for perf_event_open(2) only; -1+errno. */
  syscall: { args: [i64, P, i32, i32, i32, u64], returns: i64_fast },
  /** int dup(int oldfd); -1+errno. */
  dup: { args: [i32], returns: i32 },
  /** int close(int fd); -1+errno. */
  close: { args: [i32], returns: i32 },
  /** int memfd_create(const char *name, unsigned int flags); -1+errno. */
  memfd_create: { args: [P, u32], returns: i32 },
  /** int pthread_sigmask(int how, const sigset_t *set, sigset_t *oldset); the error number (0 on success). */
  pthread_sigmask: { args: [i32, P, P], returns: i32 },
  /** int epoll_create1(int flags); -1+errno. */
  epoll_create1: { args: [i32], returns: i32 },
  /** int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event); -1+errno. */
  epoll_ctl: { args: [i32, i32, i32, P], returns: i32 },
  /** int eventfd(unsigned int initval, int flags); -1+errno. */
  eventfd: { args: [u32, i32], returns: i32 },
} as const;

/** Dependencies of libbpf, loaded first when the embedded copy is used. */
const DEP_SYMBOLS = {
  "libz.so.1": { zlibVersion: { args: [], returns: cstring } },
  "libelf.so.1": { elf_version: { args: [u32], returns: u32 } },
} as const;

type LibbpfSymbols = ReturnType<typeof dlopen<typeof LIBBPF_SYMBOLS>>["symbols"];
type LibcSymbols = ReturnType<typeof dlopen<typeof LIBC_SYMBOLS>>["symbols"];

export interface Native {
  bpf: LibbpfSymbols;
  libc: LibcSymbols;
  info: LibbpfInfo;
}

let native: Native | undefined;
let libcSymbols: LibcSymbols | undefined;

/** `int malloc_trim(size_t pad)` of the C library, opened on first use; null when it has none (not glibc). */
let mallocTrim: ((pad: number) => number) | null | undefined;
let libcPathLoaded: string | undefined;

/**
 * Hands the C heap's free pages back to the system (glibc's malloc_trim). libbpf parses the kernel's BTF (several
 * MB of allocations) for every object it loads and frees it once loaded; glibc keeps the pages of those frees
 * resident. Does nothing where the C library has no malloc_trim or libbpf was never loaded.
 */
export function releaseFreedNativeMemory(): void {
  if (mallocTrim === undefined) {
    if (!libcPathLoaded) return;
    try {
      const trim = dlopen(libcPathLoaded, { malloc_trim: { args: [FFIType.u64], returns: FFIType.i32 } }).symbols.malloc_trim;
      mallocTrim = (pad) => trim(pad);
    } catch {
      mallocTrim = null;
    }
  }
  mallocTrim?.(0);
}

/** The errno of the calling thread; read it right after the call that failed. */
export function lastErrno(): number {
  if (!libcSymbols) return 0;
  return read.i32(libcSymbols.__errno_location() as Pointer, 0);
}

export interface LoadOptions {
  /** Environment (SVC_LIBBPF_PATH). */
  env: Record<string, string | undefined>;
  /** The embedded copies, dependencies first; a function so that only this path imports the build outputs. */
  embedded: () => Promise<ReadonlyArray<{ soname: string; path: string }>>;
}

function parseSystemVersion(realPath: string): [number, number, number] | undefined {
  const m = /libbpf\.so\.(\d+)\.(\d+)(?:\.(\d+))?$/.exec(realPath);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)] : undefined;
}

function openLibbpf(path: string): LibbpfSymbols {
  return dlopen(path, LIBBPF_SYMBOLS).symbols;
}

function versionOf(bpf: LibbpfSymbols): string {
  return `${bpf.libbpf_major_version()}.${bpf.libbpf_minor_version()}`;
}

/** Loads the embedded copies from anonymous memory files; the descriptors are closed once mapped. */
export async function loadEmbeddedFromMemory(libc: LibcSymbols, embedded: LoadOptions["embedded"]): Promise<{ bpf: LibbpfSymbols; path: string }> {
  const fds: number[] = [];
  try {
    let bpfPath = "";
    for (const lib of await embedded()) {
      const name = Buffer.from(`svc-agent-${lib.soname}\0`);
      const fd = libc.memfd_create(ptr(name), MFD_CLOEXEC);
      if (fd < 0) throw new Error(`memfd_create failed: errno ${lastErrno()}`);
      fds.push(fd);
      const bytes = await Bun.file(lib.path).bytes();
      for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off, bytes.length - off);
      const path = `/proc/self/fd/${fd}`;
      if (lib.soname === "libbpf.so.1") bpfPath = path;
      else dlopen(path, DEP_SYMBOLS[lib.soname as keyof typeof DEP_SYMBOLS]);
    }
    return { bpf: openLibbpf(bpfPath), path: `memfd:svc-agent-libbpf.so.1` };
  } finally {
    for (const fd of fds) closeSync(fd);
  }
}

/** Loads the embedded copies from a private directory under TMPDIR, removed once they are mapped (the fallback). */
export async function loadEmbeddedFromDirectory(embedded: LoadOptions["embedded"]): Promise<{ bpf: LibbpfSymbols; path: string }> {
  const dir = mkdtempSync(join(tmpdir(), "svc-agent-libbpf-"));
  try {
    let bpfPath = "";
    for (const lib of await embedded()) {
      const target = join(dir, lib.soname);
      writeFileSync(target, await Bun.file(lib.path).bytes(), { mode: 0o500 });
      if (lib.soname === "libbpf.so.1") bpfPath = target;
      else dlopen(target, DEP_SYMBOLS[lib.soname as keyof typeof DEP_SYMBOLS]);
    }
    return { bpf: openLibbpf(bpfPath), path: bpfPath };
  } finally {
    // The mappings stay valid once loaded: nothing is left on disk.
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Loads libbpf (once per process) following the order in this file's header; later calls return the same.
 * Throws LibbpfUnavailableError listing every attempt when none works.
 */
export async function loadNative(options: LoadOptions): Promise<Native> {
  if (native) return native;
  const attempts: string[] = [];
  const libcPath = findLibrary("libc.so.6", options.env);
  if (!libcPath) throw new LibbpfUnavailableError("libc.so.6 not found", librarySearchDirs(options.env));
  const libc = dlopen(libcPath, LIBC_SYMBOLS).symbols;
  libcSymbols = libc;
  libcPathLoaded = libcPath;
  let bpf: LibbpfSymbols | undefined;
  let info: LibbpfInfo | undefined;

  const override = options.env.SVC_LIBBPF_PATH;
  if (override) {
    try {
      bpf = openLibbpf(override);
      info = { source: "override", path: override, version: versionOf(bpf) };
    } catch (e) {
      throw new LibbpfUnavailableError("SVC_LIBBPF_PATH could not be loaded", [`${override}: ${(e as Error).message}`]);
    }
  }
  for (const dir of bpf ? [] : SYSTEM_LIB_DIRS) {
    const candidate = join(dir, "libbpf.so.1");
    if (!existsSync(candidate)) continue;
    const real = realpathSync(candidate);
    const v = parseSystemVersion(real);
    if (!v) {
      attempts.push(`${real}: version unknown`);
      continue;
    }
    if (v[0] < MIN_SYSTEM_MAJOR || (v[0] === MIN_SYSTEM_MAJOR && v[1] < MIN_SYSTEM_MINOR)) {
      attempts.push(`${real}: version ${v.join(".")} older than ${MIN_SYSTEM_MAJOR}.${MIN_SYSTEM_MINOR}`);
      continue;
    }
    if (statSync(real).size === 0) {
      attempts.push(`${real}: empty file`);
      continue;
    }
    try {
      bpf = openLibbpf(real);
      info = { source: "system", path: real, version: versionOf(bpf) };
      break;
    } catch (e) {
      attempts.push(`${real}: ${(e as Error).message}`);
    }
  }
  for (const [how, load] of bpf ? [] : ([["from memory", () => loadEmbeddedFromMemory(libc, options.embedded)], ["extracted", () => loadEmbeddedFromDirectory(options.embedded)]] as const)) {
    try {
      const loaded = await load();
      bpf = loaded.bpf;
      info = { source: "embedded", path: loaded.path, version: versionOf(bpf) };
      break;
    } catch (e) {
      attempts.push(`embedded copy ${how}: ${(e as Error).message}`);
    }
  }
  if (!bpf) throw new LibbpfUnavailableError("no usable libbpf", attempts);
  native = { bpf, libc, info: info! };
  return native;
}

/** The loaded library; throws when loadNative has not succeeded. */
export function nativeLib(): Native {
  if (!native) throw new Error("libbpf is not loaded (call loadNative first)");
  return native;
}
