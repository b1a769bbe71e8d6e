/**
 * Perf event array reader (kernels older than 5.8, without BPF ring buffers): libbpf's perf_buffer with
 * JSCallbacks for samples and lost-sample notices, drained with perf_buffer__consume (never waits). No JS
 * exception crosses libbpf's frames: a record's error is caught in the sample callback (and, for `consume`,
 * thrown once libbpf returned).
 */
import { JSCallback, toArrayBuffer, type Pointer } from "bun:ffi";
import { LibbpfError } from "./errors";
import { lastErrno, nativeLib } from "./libbpf";
import type { RecordDecoderFn, RecordReader, RecordHandler } from "./types";

export class PerfBufferReader implements RecordReader {
  readonly kind = "perfbuf" as const;
  readonly name: string;
  #pb: Pointer | undefined;
  #sample: JSCallback | undefined;
  #lost: JSCallback | undefined;
  #handler: RecordHandler | undefined;
  #onError: ((error: unknown) => void) | undefined;
  #count = 0;
  #lostReported = 0;

  constructor(mapFd: number, pageCount: number, name: string) {
    this.name = name;
    this.#sample = new JSCallback(
      (_ctx: Pointer, _cpu: number, data: Pointer, size: number) => {
        if (!this.#handler) return;
        this.#count++;
        try {
          this.#handler(new DataView(toArrayBuffer(data, 0, size)), 0, size);
        } catch (e) {
          this.#onError?.(e);
        }
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

  /** Drains every CPU's buffer (`maxRecords` is not applied: libbpf reads whole buffers); the first error a record threw is thrown after. */
  consume(onRecord: RecordHandler): number {
    let first: { error: unknown } | undefined;
    const n = this.#drain(onRecord, (error) => {
      first ??= { error };
    });
    if (first) throw first.error;
    return n;
  }

  consumeDecoded<E>(decode: RecordDecoderFn<E>, sink: (event: E) => void, _maxRecords: number, onError: (error: unknown) => void): number {
    return this.#drain((view, offset, length) => sink(decode(view, offset, length)), onError);
  }

  #drain(onRecord: RecordHandler, onError: (error: unknown) => void): number {
    if (!this.#pb) return 0;
    this.#handler = onRecord;
    this.#onError = onError;
    this.#count = 0;
    const r = nativeLib().bpf.perf_buffer__consume(this.#pb);
    this.#handler = undefined;
    this.#onError = undefined;
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
