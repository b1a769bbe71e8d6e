/**
 * Perf event array reader (kernels older than 5.8, without BPF ring buffers): libbpf's perf_buffer with
 * JSCallbacks for samples and lost-sample notices, drained with perf_buffer__consume (never waits).
 */
import { JSCallback, toArrayBuffer, type Pointer } from "bun:ffi";
import { LibbpfError } from "./errors";
import { lastErrno, nativeLib } from "./libbpf";
import type { RecordHandler, RecordReader } from "./types";

export class PerfBufferReader implements RecordReader {
  readonly kind = "perfbuf" as const;
  readonly name: string;
  #pb: Pointer | undefined;
  #sample: JSCallback | undefined;
  #lost: JSCallback | undefined;
  #handler: RecordHandler | undefined;
  #count = 0;
  #lostReported = 0;

  constructor(mapFd: number, pageCount: number, name: string) {
    this.name = name;
    this.#sample = new JSCallback(
      (_ctx: Pointer, _cpu: number, data: Pointer, size: number) => {
        if (!this.#handler) return;
        this.#handler(new DataView(toArrayBuffer(data, 0, size)), 0, size);
        this.#count++;
      },
      { args: ["ptr", "i32", "ptr", "u32"], returns: "void" },
    );
    this.#lost = new JSCallback(
      (_ctx: Pointer, _cpu: number, count: number | bigint) => {
        this.#lostReported += Number(count);
      },
      { args: ["ptr", "i32", "u64"], returns: "void" },
    );
    const pb = nativeLib().bpf.perf_buffer__new(mapFd, pageCount, this.#sample.ptr!, this.#lost.ptr!, null, null);
    if (!pb) {
      const errno = lastErrno();
      this.#sample.close();
      this.#lost.close();
      throw new LibbpfError("perf_buffer__new", errno, { subject: name });
    }
    this.#pb = pb;
  }

  get lostReported(): number {
    return this.#lostReported;
  }

  /** Drains every CPU's buffer (`maxRecords` is not applied: libbpf reads whole buffers). */
  consume(onRecord: RecordHandler): number {
    if (!this.#pb) return 0;
    this.#handler = onRecord;
    this.#count = 0;
    const r = nativeLib().bpf.perf_buffer__consume(this.#pb);
    this.#handler = undefined;
    if (r < 0) throw new LibbpfError("perf_buffer__consume", -r, { subject: this.name });
    return this.#count;
  }

  close(): void {
    if (!this.#pb) return;
    nativeLib().bpf.perf_buffer__free(this.#pb);
    this.#pb = undefined;
    this.#sample?.close();
    this.#lost?.close();
    this.#sample = undefined;
    this.#lost = undefined;
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
