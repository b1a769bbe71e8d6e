/**
 * gzip message compression at a chosen level (`otlp.compression_level`) for the gRPC channel of the transport.
 * grpc-js compresses with zlib's default level (6) and has no option for another; at level 1 a batch of spans
 * costs about a quarter of the CPU time for about 11% more bytes (bench/findings.md, export; `bun bench/export.ts`
 * against `bun bench/export.ts --level 6`). grpc-js exports no filter API, so this filter (grpc-js 1.14.7, pinned) takes
 * the place of grpc-js's compression filter in the filter stack of one channel (ours only: other channels of
 * the process keep grpc-js's own), and does what it does for gzip: `grpc-encoding: gzip`, the 5-byte gRPC
 * message frame with the compressed flag, compression in zlib's thread pool (off the event loop), identity
 * when the server says it does not accept gzip, and decompression of gzip answers.
 */
import { promisify } from "node:util";
import { gunzipSync, gzip } from "node:zlib";
import * as grpc from "@grpc/grpc-js";
import { CompressionFilterFactory } from "@grpc/grpc-js/build/src/compression-filter";

/** Bytes of the gRPC message frame header: compressed flag (1) and length (4, big endian). */
const FRAME_HEADER_BYTES = 5;
/** grpc-js WriteFlags.NoCompress: the caller asks for this message to be sent uncompressed. */
const WRITE_FLAG_NO_COMPRESS = 2;

const gzipAsync = promisify(gzip) as (data: Uint8Array, options: { level: number }) => Promise<Buffer>;

/** The filter shape grpc-js's FilterStack calls (filter.ts of grpc-js; not exported by the package). */
interface WriteObject {
  message: Buffer;
  flags?: number;
}

/** A received message could not be decompressed (answered as INTERNAL, like grpc-js's own filter). */
export class GzipFilterError extends Error {
  readonly code = grpc.status.INTERNAL;
  readonly details: string;
  constructor(message: string) {
    super(message);
    this.name = "GzipFilterError";
    this.details = message;
  }
}

/** State shared by the filters of one channel: what the server said it accepts (`grpc-accept-encoding`). */
interface SharedState {
  serverAcceptsGzip: boolean | undefined;
}

/** Frames `payload` as one gRPC message. */
export function frameMessage(payload: Uint8Array, compressed: boolean): Buffer {
  const out = Buffer.allocUnsafe(payload.length + FRAME_HEADER_BYTES);
  out[0] = compressed ? 1 : 0;
  out.writeUInt32BE(payload.length, 1);
  out.set(payload, FRAME_HEADER_BYTES);
  return out;
}

class GzipLevelFilter {
  readonly #level: number;
  readonly #shared: SharedState;
  readonly #maxReceiveBytes: number;
  #compress = true;
  #receiveGzip = false;

  constructor(level: number, shared: SharedState, maxReceiveBytes: number) {
    this.#level = level;
    this.#shared = shared;
    this.#maxReceiveBytes = maxReceiveBytes;
  }

  async sendMetadata(metadata: Promise<grpc.Metadata>): Promise<grpc.Metadata> {
    const headers = await metadata;
    headers.set("grpc-accept-encoding", "identity,gzip");
    headers.set("accept-encoding", "identity");
    this.#compress = this.#shared.serverAcceptsGzip !== false;
    if (this.#compress) headers.set("grpc-encoding", "gzip");
    else headers.remove("grpc-encoding");
    return headers;
  }

  receiveMetadata(metadata: grpc.Metadata): grpc.Metadata {
    const encoding = metadata.get("grpc-encoding")[0];
    this.#receiveGzip = encoding === "gzip";
    metadata.remove("grpc-encoding");
    const accepted = metadata.get("grpc-accept-encoding")[0];
    if (typeof accepted === "string") this.#shared.serverAcceptsGzip = accepted.split(",").some((e) => e.trim() === "gzip");
    metadata.remove("grpc-accept-encoding");
    return metadata;
  }

  async sendMessage(message: Promise<WriteObject>): Promise<WriteObject> {
    const m = await message;
    const compress = this.#compress && ((m.flags ?? 0) & WRITE_FLAG_NO_COMPRESS) === 0;
    const payload = compress ? await gzipAsync(m.message, { level: this.#level }) : m.message;
    return { message: frameMessage(payload, compress), flags: m.flags };
  }

  async receiveMessage(message: Promise<Buffer>): Promise<Buffer> {
    const data = await message;
    const body = data.subarray(FRAME_HEADER_BYTES);
    if (data[0] !== 1) return body;
    if (!this.#receiveGzip) throw new GzipFilterError("compressed message received without grpc-encoding gzip");
    try {
      return gunzipSync(body, { maxOutputLength: this.#maxReceiveBytes });
    } catch (e) {
      throw new GzipFilterError(`failed to decompress gzip-encoded message: ${(e as Error).message}`);
    }
  }

  receiveTrailers(status: grpc.StatusObject): grpc.StatusObject {
    return status;
  }
}

/** Creates one GzipLevelFilter per call, sharing what the server accepts across the calls of the channel. */
class GzipLevelFilterFactory {
  readonly #shared: SharedState = { serverAcceptsGzip: undefined };
  constructor(
    readonly level: number,
    readonly maxReceiveBytes: number,
  ) {}

  createFilter(): GzipLevelFilter {
    return new GzipLevelFilter(this.level, this.#shared, this.maxReceiveBytes);
  }
}

/** The part of grpc-js's channel internals the filter is installed in (grpc-js 1.14: InternalChannel.filterStackFactory). */
interface ChannelInternals {
  internalChannel?: { filterStackFactory?: { factories?: unknown[] } };
}

/**
 * Puts gzip at `level` in place of grpc-js's compression filter on `channel`. Returns false (nothing changed)
 * when the channel is not shaped as expected; the channel then keeps grpc-js's own gzip at its default level.
 */
export function installGzipLevel(channel: grpc.ChannelInterface, level: number, maxReceiveBytes: number): boolean {
  const factories = (channel as unknown as ChannelInternals).internalChannel?.filterStackFactory?.factories;
  if (!Array.isArray(factories)) return false;
  const at = factories.findIndex((f) => f instanceof CompressionFilterFactory);
  if (at < 0) return false;
  factories[at] = new GzipLevelFilterFactory(level, maxReceiveBytes);
  return true;
}
