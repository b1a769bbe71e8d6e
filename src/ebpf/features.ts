/**
 * Kernel features the loader needs, probed once per process and memoised. A missing feature is an
 * `UnsupportedFeatureError { feature, minKernel }`.
 */
import { existsSync } from "node:fs";
import { release } from "node:os";
import type { BpfRuntime } from "../../ffi/types";

export const MIN_KERNEL = "4.18";
export const RINGBUF_MIN_KERNEL = "5.8";
export const VMLINUX_BTF = "/sys/kernel/btf/vmlinux";
const PMU_DIR = "/sys/bus/event_source/devices";
const TRACEFS_DIR = "/sys/kernel/tracing";

export class UnsupportedFeatureError extends Error {
  override readonly name = "UnsupportedFeatureError";
  constructor(
    readonly feature: string,
    readonly minKernel: string | undefined,
    detail: string,
  ) {
    super(`${feature} not supported by this kernel${minKernel ? ` (needs ${minKernel} or newer)` : ""}: ${detail}`);
  }
}

/** "6.18.44-fc" -> [6, 18]; [0, 0] when it does not parse. */
export function parseKernelRelease(text: string): [number, number] {
  const m = /^(\d+)\.(\d+)/.exec(text);
  return m ? [Number(m[1]), Number(m[2])] : [0, 0];
}

export function kernelAtLeast(version: string, kernel: [number, number] = parseKernelRelease(release())): boolean {
  const [maj, min] = parseKernelRelease(version);
  return kernel[0] > maj || (kernel[0] === maj && kernel[1] >= min);
}

/** Memoised probes; one instance per runtime. */
export class FeatureProbes {
  readonly #memo = new Map<string, UnsupportedFeatureError | null>();

  constructor(
    readonly runtime: Pick<BpfRuntime, "probeMapType">,
    readonly kernelRelease: string = release(),
    readonly exists: (path: string) => boolean = existsSync,
  ) {}

  #once(feature: string, probe: () => UnsupportedFeatureError | null): UnsupportedFeatureError | null {
    if (!this.#memo.has(feature)) this.#memo.set(feature, probe());
    return this.#memo.get(feature)!;
  }

  /** BPF ring buffers (5.8+): kernel version and a real map creation probe. */
  ringbuf(): UnsupportedFeatureError | null {
    return this.#once("ringbuf", () => {
      if (!kernelAtLeast(RINGBUF_MIN_KERNEL, parseKernelRelease(this.kernelRelease)))
        return new UnsupportedFeatureError("BPF ring buffer", RINGBUF_MIN_KERNEL, `kernel ${this.kernelRelease}`);
      if (!this.runtime.probeMapType("ringbuf")) return new UnsupportedFeatureError("BPF ring buffer", RINGBUF_MIN_KERNEL, "map creation probe failed");
      return null;
    });
  }

  /**
   * Whether programs of an attach kind can attach here: kprobes and uprobes need their perf PMU or the
   * tracefs *_events files (absent when CONFIG_KPROBES / CONFIG_UPROBES are off), tp_btf needs kernel BTF.
   */
  attachKind(kind: string): UnsupportedFeatureError | null {
    const base = kind === "kretprobe" ? "kprobe" : kind === "uretprobe" ? "uprobe" : kind;
    if (base === "kprobe" || base === "uprobe") {
      return this.#once(`attach:${base}`, () =>
        this.exists(`${PMU_DIR}/${base}`) || this.exists(`${TRACEFS_DIR}/${base}_events`)
          ? null
          : new UnsupportedFeatureError(base, undefined, `ENOENT: no ${base} PMU (${PMU_DIR}/${base}) and no ${TRACEFS_DIR}/${base}_events: CONFIG_${base.toUpperCase()}S is off`),
      );
    }
    if (base === "tp_btf") {
      return this.#once("attach:tp_btf", () => (this.exists(VMLINUX_BTF) ? null : new UnsupportedFeatureError("tp_btf", "5.5", `ENOENT: ${VMLINUX_BTF} is missing`)));
    }
    return null;
  }
}
