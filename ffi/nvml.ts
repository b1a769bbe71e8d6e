/**
 * NVIDIA Management Library (NVML) through bun:ffi: its own `dlopen` of libnvidia-ml.so.1 (a native library
 * separate from libbpf, so it lives apart from ./libbpf.ts), the symbol table with C signatures, and a
 * typed wrapper. Device handles (pointers) stay in this file: callers name devices by index.
 *
 * Error convention: every NVML function returns `nvmlReturn_t` (0 = NVML_SUCCESS); anything else becomes an
 * `NvmlError` with the call, the code and its NVML name. A library that cannot be opened (absent, or missing
 * a symbol) is an `NvmlUnavailableError`.
 *
 * Memory: `nvmlDeviceGetMemoryInfo_v2` (drivers R510 and later) separates the memory the driver and firmware
 * reserve from the memory allocations use; the v1 call counts reserved memory as used (an idle H100 reads about
 * 480 MiB used where nvidia-smi says 0). The v2 symbol is optional: it is looked up by a second `dlopen` of the
 * same library, and the v1 call is used when it is absent or refuses the struct version.
 */
import { findLibrary, librarySearchDirs } from "./library-path";
import { dlopen, FFIType } from "bun:ffi";

const { ptr: P, i32, u32, u64, cstring } = FFIType;

/**
 * Where a bare library name is looked for (after LD_LIBRARY_PATH and /etc/ld.so.conf.d): Debian/Ubuntu, RHEL,
 * the NVIDIA container toolkit's mount, WSL. A bare name is never handed to dlopen, because Bun's dlopen tries
 * the current directory first (a planted library there would be loaded).
 */
const NVIDIA_LIBRARY_DIRS = ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/wsl/lib"];
const NAME_BUFFER_BYTES = 96;
const UUID_BUFFER_BYTES = 96;
/** nvmlProcessInfo_t (v2/v3 layout): pid u32, pad, usedGpuMemory u64, gpuInstanceId u32, computeInstanceId u32. */
const PROCESS_INFO_BYTES = 24;
const INITIAL_PROCESS_SLOTS = 32;
const NVML_TEMPERATURE_GPU = 0;
/** usedGpuMemory when the driver cannot tell (NVML_VALUE_NOT_AVAILABLE). */
const NVML_VALUE_NOT_AVAILABLE = 0xffffffffffffffffn;
/** nvmlMemory_v2_t: u32 version, pad, u64 total, reserved, free, used. */
const MEMORY_V2_BYTES = 40;
/** NVML_STRUCT_VERSION(Memory, 2): sizeof(nvmlMemory_v2_t) | 2 << 24. */
const NVML_MEMORY_V2_VERSION = (MEMORY_V2_BYTES | (2 << 24)) >>> 0;

const NVML_SYMBOLS = {
  /** nvmlReturn_t nvmlInit_v2(void); */
  nvmlInit_v2: { args: [], returns: i32 },
  /** nvmlReturn_t nvmlShutdown(void); */
  nvmlShutdown: { args: [], returns: i32 },
  /** const char *nvmlErrorString(nvmlReturn_t result); never NULL. */
  nvmlErrorString: { args: [i32], returns: cstring },
  /** nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount); */
  nvmlDeviceGetCount_v2: { args: [P], returns: i32 },
  /** nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device); */
  nvmlDeviceGetHandleByIndex_v2: { args: [u32, P], returns: i32 },
  /** nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length); */
  nvmlDeviceGetName: { args: [u64, P, u32], returns: i32 },
  /** nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length); */
  nvmlDeviceGetUUID: { args: [u64, P, u32], returns: i32 },
  /** nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization); {u32 gpu, u32 memory} percent. */
  nvmlDeviceGetUtilizationRates: { args: [u64, P], returns: i32 },
  /** nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory); {u64 total, free, used} bytes. */
  nvmlDeviceGetMemoryInfo: { args: [u64, P], returns: i32 },
  /** nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp); degrees C. */
  nvmlDeviceGetTemperature: { args: [u64, u32, P], returns: i32 },
  /** nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power); milliwatts. */
  nvmlDeviceGetPowerUsage: { args: [u64, P], returns: i32 },
  /**
   * nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos);
   * NVML_ERROR_INSUFFICIENT_SIZE with *infoCount set to the number needed when the array is too small.
   */
  nvmlDeviceGetComputeRunningProcesses_v3: { args: [u64, P, P], returns: i32 },
  /** nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos); as above. */
  nvmlDeviceGetGraphicsRunningProcesses_v3: { args: [u64, P, P], returns: i32 },
} as const;

/** Symbols only newer drivers have, opened separately (a missing one must not make the library unusable). */
const NVML_MEMORY_V2_SYMBOLS = {
  /**
   * nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
   * {u32 version (in: nvmlMemory_v2), u64 total, reserved, free, used} bytes; used excludes reserved.
   * NVML_ERROR_ARGUMENT_VERSION_MISMATCH when the driver does not know the version.
   */
  nvmlDeviceGetMemoryInfo_v2: { args: [u64, P], returns: i32 },
} as const;

/** nvmlReturn_t values by name (nvml.h). */
export const NVML_RETURN_NAMES: Record<number, string> = {
  0: "NVML_SUCCESS", 1: "NVML_ERROR_UNINITIALIZED", 2: "NVML_ERROR_INVALID_ARGUMENT", 3: "NVML_ERROR_NOT_SUPPORTED",
  4: "NVML_ERROR_NO_PERMISSION", 5: "NVML_ERROR_ALREADY_INITIALIZED", 6: "NVML_ERROR_NOT_FOUND", 7: "NVML_ERROR_INSUFFICIENT_SIZE",
  8: "NVML_ERROR_INSUFFICIENT_POWER", 9: "NVML_ERROR_DRIVER_NOT_LOADED", 10: "NVML_ERROR_TIMEOUT", 11: "NVML_ERROR_IRQ_ISSUE",
  12: "NVML_ERROR_LIBRARY_NOT_FOUND", 13: "NVML_ERROR_FUNCTION_NOT_FOUND", 14: "NVML_ERROR_CORRUPTED_INFOROM",
  15: "NVML_ERROR_GPU_IS_LOST", 16: "NVML_ERROR_RESET_REQUIRED", 17: "NVML_ERROR_OPERATING_SYSTEM",
  18: "NVML_ERROR_LIB_RM_VERSION_MISMATCH", 19: "NVML_ERROR_IN_USE", 20: "NVML_ERROR_MEMORY", 21: "NVML_ERROR_NO_DATA",
  22: "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED", 23: "NVML_ERROR_INSUFFICIENT_RESOURCES", 24: "NVML_ERROR_FREQ_NOT_SUPPORTED",
  25: "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 26: "NVML_ERROR_DEPRECATED", 27: "NVML_ERROR_NOT_READY",
  28: "NVML_ERROR_GPU_NOT_FOUND", 29: "NVML_ERROR_INVALID_STATE", 999: "NVML_ERROR_UNKNOWN",
};
export const NVML_ERROR_NOT_SUPPORTED = 3;
const NVML_ERROR_INSUFFICIENT_SIZE = 7;
const NVML_ERROR_FUNCTION_NOT_FOUND = 13;
const NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25;

/** A failing NVML call: which call, its nvmlReturn_t and the name of it. */
export class NvmlError extends Error {
  override readonly name = "NvmlError";
  /** e.g. `nvmlDeviceGetPowerUsage`. */
  readonly op: string;
  /** The nvmlReturn_t value. */
  readonly result: number;
  /** e.g. `NVML_ERROR_NOT_SUPPORTED`. */
  readonly code: string;
  constructor(op: string, result: number, text: string) {
    const code = NVML_RETURN_NAMES[result] ?? `NVML_ERROR_${result}`;
    super(`${op} failed: ${code}${text ? `: ${text}` : ""}`);
    this.op = op;
    this.result = result;
    this.code = code;
  }
}

/** The NVML library could not be opened (not installed, or not an NVML library). */
export class NvmlUnavailableError extends Error {
  override readonly name = "NvmlUnavailableError";
  constructor(readonly library: string, detail: string) {
    super(`NVML library ${library} ${/no such file|cannot open shared object/i.test(detail) ? "not found" : "not usable"}: ${detail}`);
  }
}

/** One process using a GPU. */
export interface GpuProcess {
  pid: number;
  /** Bytes of GPU memory the process uses; undefined when the driver cannot tell (e.g. under WDDM or MIG). */
  usedMemoryBytes: number | undefined;
  kind: "compute" | "graphics";
}

/** A reading of one device; a field the device does not support (or whose read failed) is undefined and its error kept. */
export interface GpuReading {
  index: number;
  name: string;
  uuid: string;
  /** Percent of time a kernel ran over the driver's last sample period. */
  utilizationPercent?: number;
  /** Percent of time device memory was read or written. */
  memoryUtilizationPercent?: number;
  /** Memory allocations use (without the driver's reserved memory when `memoryInfoVersion` is 2; with it under 1). */
  memoryUsedBytes?: number;
  /** Memory the driver and firmware reserve (only from the v2 call). */
  memoryReservedBytes?: number;
  memoryTotalBytes?: number;
  /** Which nvmlDeviceGetMemoryInfo answered: 2 (`_v2`, reserved memory apart) or 1 (reserved counted as used). */
  memoryInfoVersion?: 1 | 2;
  temperatureCelsius?: number;
  powerWatts?: number;
  processes: GpuProcess[];
  /** Errors of the individual reads (NOT_SUPPORTED included), by field. */
  errors: Record<string, NvmlError>;
}

/** What the GPU collector programs against (the stand-in tests and fakes implement it too). */
export interface NvmlApi extends Disposable {
  /** Which library was opened. */
  readonly library: string;
  /** Number of devices NVML sees. */
  deviceCount(): number;
  /** Reads every metric of device `index`; throws NvmlError only when the device itself cannot be reached. */
  readDevice(index: number): GpuReading;
  /** nvmlShutdown. Idempotent. */
  close(): void;
}

type NvmlSymbols = ReturnType<typeof dlopen<typeof NVML_SYMBOLS>>["symbols"];
type NvmlMemoryV2 = ReturnType<typeof dlopen<typeof NVML_MEMORY_V2_SYMBOLS>>;

class Nvml implements NvmlApi {
  readonly #sym: NvmlSymbols;
  readonly #close: () => void;
  readonly #handles = new Map<number, bigint>();
  /** The v2 memory call; undefined when the library lacks it or the driver refused its struct version. */
  #memoryV2: NvmlMemoryV2 | undefined;
  #open = true;

  constructor(readonly library: string, sym: NvmlSymbols, close: () => void, memoryV2: NvmlMemoryV2 | undefined) {
    this.#sym = sym;
    this.#close = close;
    this.#memoryV2 = memoryV2;
  }

  #check(op: string, r: number): void {
    if (r !== 0) throw new NvmlError(op, r, this.#sym.nvmlErrorString(r)?.toString() ?? "");
  }

  deviceCount(): number {
    const n = new Uint32Array(1);
    this.#check("nvmlDeviceGetCount_v2", this.#sym.nvmlDeviceGetCount_v2(n));
    return n[0]!;
  }

  #handle(index: number): bigint {
    let h = this.#handles.get(index);
    if (h === undefined) {
      const out = new BigUint64Array(1);
      this.#check("nvmlDeviceGetHandleByIndex_v2", this.#sym.nvmlDeviceGetHandleByIndex_v2(index, out));
      h = out[0]!;
      this.#handles.set(index, h);
    }
    return h;
  }

  #text(op: string, fn: (h: bigint, buf: Uint8Array, len: number) => number, h: bigint, size: number): string {
    const buf = new Uint8Array(size);
    this.#check(op, fn(h, buf, size));
    const end = buf.indexOf(0);
    return new TextDecoder().decode(buf.subarray(0, end < 0 ? size : end));
  }

  readDevice(index: number): GpuReading {
    const s = this.#sym;
    const h = this.#handle(index);
    const reading: GpuReading = {
      index,
      name: this.#text("nvmlDeviceGetName", s.nvmlDeviceGetName, h, NAME_BUFFER_BYTES),
      uuid: this.#text("nvmlDeviceGetUUID", s.nvmlDeviceGetUUID, h, UUID_BUFFER_BYTES),
      processes: [],
      errors: {},
    };
    const attempt = (field: string, fn: () => void) => {
      try {
        fn();
      } catch (e) {
        if (!(e instanceof NvmlError)) throw e;
        reading.errors[field] = e;
      }
    };
    attempt("utilization", () => {
      const u = new Uint32Array(2);
      this.#check("nvmlDeviceGetUtilizationRates", s.nvmlDeviceGetUtilizationRates(h, u));
      reading.utilizationPercent = u[0];
      reading.memoryUtilizationPercent = u[1];
    });
    attempt("memory", () => {
      if (this.#readMemoryV2(h, reading)) return;
      const m = new BigUint64Array(3);
      this.#check("nvmlDeviceGetMemoryInfo", s.nvmlDeviceGetMemoryInfo(h, m));
      reading.memoryTotalBytes = Number(m[0]);
      reading.memoryUsedBytes = Number(m[2]);
      reading.memoryInfoVersion = 1;
    });
    attempt("temperature", () => {
      const t = new Uint32Array(1);
      this.#check("nvmlDeviceGetTemperature", s.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU, t));
      reading.temperatureCelsius = t[0];
    });
    attempt("power", () => {
      const p = new Uint32Array(1);
      this.#check("nvmlDeviceGetPowerUsage", s.nvmlDeviceGetPowerUsage(h, p));
      reading.powerWatts = p[0]! / 1000;
    });
    attempt("compute_processes", () => reading.processes.push(...this.#processes("nvmlDeviceGetComputeRunningProcesses_v3", s.nvmlDeviceGetComputeRunningProcesses_v3, h, "compute")));
    attempt("graphics_processes", () => reading.processes.push(...this.#processes("nvmlDeviceGetGraphicsRunningProcesses_v3", s.nvmlDeviceGetGraphicsRunningProcesses_v3, h, "graphics")));
    return reading;
  }

  /** Fills the memory fields from nvmlDeviceGetMemoryInfo_v2; false (and v2 given up) when the driver does not take it. */
  #readMemoryV2(h: bigint, reading: GpuReading): boolean {
    const v2 = this.#memoryV2;
    if (!v2) return false;
    const buf = new BigUint64Array(MEMORY_V2_BYTES / 8);
    new DataView(buf.buffer).setUint32(0, NVML_MEMORY_V2_VERSION, true);
    const r = v2.symbols.nvmlDeviceGetMemoryInfo_v2(h, buf);
    if (r === NVML_ERROR_ARGUMENT_VERSION_MISMATCH || r === NVML_ERROR_FUNCTION_NOT_FOUND || r === NVML_ERROR_NOT_SUPPORTED) {
      v2.close();
      this.#memoryV2 = undefined;
      return false;
    }
    this.#check("nvmlDeviceGetMemoryInfo_v2", r);
    reading.memoryTotalBytes = Number(buf[1]);
    reading.memoryReservedBytes = Number(buf[2]);
    reading.memoryUsedBytes = Number(buf[4]);
    reading.memoryInfoVersion = 2;
    return true;
  }

  #processes(op: string, fn: (h: bigint, count: Uint32Array, infos: Uint8Array) => number, h: bigint, kind: GpuProcess["kind"]): GpuProcess[] {
    let slots = INITIAL_PROCESS_SLOTS;
    for (;;) {
      const count = new Uint32Array([slots]);
      const infos = new Uint8Array(slots * PROCESS_INFO_BYTES);
      const r = fn(h, count, infos);
      if (r === NVML_ERROR_INSUFFICIENT_SIZE && count[0]! > slots) {
        slots = count[0]!;
        continue;
      }
      this.#check(op, r);
      const dv = new DataView(infos.buffer);
      const out: GpuProcess[] = [];
      for (let i = 0; i < Math.min(count[0]!, slots); i++) {
        const o = i * PROCESS_INFO_BYTES;
        const used = dv.getBigUint64(o + 8, true);
        out.push({ pid: dv.getUint32(o, true), usedMemoryBytes: used === NVML_VALUE_NOT_AVAILABLE ? undefined : Number(used), kind });
      }
      return out;
    }
  }

  close(): void {
    if (!this.#open) return;
    this.#open = false;
    this.#sym.nvmlShutdown();
    this.#memoryV2?.close();
    this.#memoryV2 = undefined;
    this.#close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/**
 * Opens NVML from `library` (a path, or a bare name searched in LD_LIBRARY_PATH, /etc/ld.so.conf.d and the usual
 * library directories) and initialises it.
 * Throws NvmlUnavailableError when the library cannot be opened, NvmlError when nvmlInit fails
 * (e.g. NVML_ERROR_DRIVER_NOT_LOADED).
 */
export function openNvml(library: string, env: Record<string, string | undefined> = process.env): NvmlApi {
  const path = resolveLibrary(library, env);
  let lib: ReturnType<typeof dlopen<typeof NVML_SYMBOLS>>;
  try {
    lib = dlopen(path, NVML_SYMBOLS);
  } catch (e) {
    throw new NvmlUnavailableError(library, (e as Error).message);
  }
  const r = lib.symbols.nvmlInit_v2();
  if (r !== 0) {
    const text = lib.symbols.nvmlErrorString(r)?.toString() ?? "";
    lib.close();
    throw new NvmlError("nvmlInit_v2", r, text);
  }
  let memoryV2: NvmlMemoryV2 | undefined;
  try {
    memoryV2 = dlopen(path, NVML_MEMORY_V2_SYMBOLS);
  } catch {
    memoryV2 = undefined; // a driver before R510: nvmlDeviceGetMemoryInfo only
  }
  return new Nvml(library, lib.symbols, () => lib.close(), memoryV2);
}

/** An absolute path for `library`: itself when it contains a slash, else the first directory holding it. Throws NvmlUnavailableError. */
export function resolveLibrary(library: string, env: Record<string, string | undefined>): string {
  const path = findLibrary(library, env, NVIDIA_LIBRARY_DIRS);
  if (path) return path;
  throw new NvmlUnavailableError(library, `no such file in ${librarySearchDirs(env, NVIDIA_LIBRARY_DIRS).join(", ")}`);
}
