/**
 * The optional persistent form of the first link (`queues.<signal>.persistent: true`): the in-memory queue
 * (same capacity and mem_limit) backed by an append-only log on disk under `storage.directory`, so that items
 * accepted survive kill -9 and a restart and are exported afterwards.
 *
 * Layout: `<directory>/queue/<signal>/seg-<first sequence number, 20 digits>.log` segments of records
 * `[u32 payload length][u32 crc32 of payload][payload]` (little endian), payload `[u32 n][n item bytes][meta
 * JSON]`; and `cursor`: `[u64 committed sequence number][u32 crc32]`. Every item appended gets the next
 * sequence number. A resource or scope is written once per segment, as a definition record (payload
 * `[u32 0xffffffff][u32 id][JSON]`, no sequence number) before the first item that refers to it by id
 * (`"R"`/`"S"` in the item's meta; records of older versions carry `"r"`/`"s"` inline and still read).
 * The committed cursor is the lowest sequence number not yet done with: items are done when
 * their batch was exported or dropped for good (permanent error, partial success), never merely when taken,
 * so after a crash only batches in flight (at most queues.<signal>.max_in_flight) are sent twice. A segment is deleted
 * once every record in it lies below the cursor.
 *
 * Durability: each record is one write(2) before the item is accepted (in the page cache: survives kill -9);
 * fsync every `storage.fsync_interval` (0: after every record; covers power loss). On start, records from the
 * cursor on are read back (a torn or corrupt tail, from a crash mid-write, is cut at the last good record).
 * ENOSPC/EDQUOT on append: the item is refused with `disk_full` (the pipeline drops and counts it), the
 * partial record is cut off, and appends are tried again for the next items.
 */
import { closeSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { Attributes } from "./types";
import { estimateProfileBytes, queuedBytes, type EncodedItem } from "./encode";
import type { Scope } from "./model";
import { SignalQueue, type OfferResult } from "./queue";

/** A segment is closed and a new one begun past this size. */
export const SEGMENT_BYTES = 8 * 1024 * 1024;
const RECORD_HEADER_BYTES = 8;
const CURSOR_BYTES = 12;
/** After a disk-full failure, appends are tried again once space was freed by done batches, or after this long. */
const DISK_FULL_RETRY_MS = 1000;
/** Interned resource/scope objects kept at most (items are grouped by object identity when encoded). */
const MAX_INTERNED = 10_000;
/** First word of a definition record's payload (an item's byte count is never this large). */
const DEFINITION = 0xffffffff;

export interface PersistentQueueOptions {
  /** Directory of this signal's log (created when missing). */
  directory: string;
  capacity: number;
  memLimitBytes: number;
  /** fsync period in ms; 0 syncs after every record. */
  fsyncIntervalMs: number;
  /** Called when appends start or stop failing for lack of space. */
  onDiskFull?: (full: boolean, error: string) => void;
}

/** The persistence could not be set up or read (directory not writable, unreadable segment). */
export class PersistentQueueError extends Error {
  constructor(
    readonly directory: string,
    message: string,
  ) {
    super(`${directory}: ${message}`);
    this.name = "PersistentQueueError";
  }
}

interface Segment {
  first: number;
  path: string;
}

const isDiskFull = (e: unknown) => ["ENOSPC", "EDQUOT"].includes((e as NodeJS.ErrnoException).code ?? "");

/** JSON that keeps bigint and Uint8Array values (item metadata). */
function replacer(_key: string, v: unknown): unknown {
  if (typeof v === "bigint") return { $b: v.toString() };
  if (v instanceof Uint8Array) return { $u: Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64") };
  return v;
}
function reviver(_key: string, v: unknown): unknown {
  if (v && typeof v === "object" && !Array.isArray(v)) {
    const o = v as Record<string, unknown>;
    if (typeof o.$b === "string" && Object.keys(o).length === 1) return BigInt(o.$b);
    if (typeof o.$u === "string" && Object.keys(o).length === 1) return new Uint8Array(Buffer.from(o.$u, "base64"));
  }
  return v;
}

export class PersistentQueue extends SignalQueue {
  readonly #dir: string;
  readonly #fsyncMs: number;
  readonly #onDiskFull: PersistentQueueOptions["onDiskFull"];
  readonly #segments: Segment[] = [];
  /** Sequence numbers of the items in memory, in queue order. */
  #seqs: number[] = [];
  #seqHead = 0;
  /** Batches taken and not done with: batch -> its lowest sequence number. */
  readonly #outstanding = new Map<readonly EncodedItem[], number>();
  #nextSeq = 0;
  #committed = 0;
  #fd = -1;
  #fdBytes = 0;
  #cursorFd = -1;
  #dirty = false;
  #diskFull = false;
  #retryAppend = false;
  #fullSince = 0;
  #timer: ReturnType<typeof setInterval> | undefined;
  readonly #interned = new Map<string, unknown>();
  /** Ids of resource and scope objects (by identity), and those already defined in the current segment. */
  #ids = new WeakMap<object, number>();
  #nextId = 0;
  #defined = new Set<number>();
  #definedPath = "";
  /** Items read back at start that did not fit capacity or mem_limit (already done with on disk). */
  readonly restoredDropped: { queue_full: number; mem_limit: number } = { queue_full: 0, mem_limit: 0 };
  /** Items read back at start and queued. */
  restored = 0;
  /** Records cut from a torn or corrupt tail at start. */
  truncatedRecords = 0;

  constructor(o: PersistentQueueOptions) {
    super(o.capacity, o.memLimitBytes);
    this.#dir = o.directory;
    this.#fsyncMs = o.fsyncIntervalMs;
    this.#onDiskFull = o.onDiskFull;
    try {
      mkdirSync(o.directory, { recursive: true, mode: 0o700 });
      this.#cursorFd = openSync(join(o.directory, "cursor"), "a+");
      closeSync(this.#cursorFd);
      this.#cursorFd = openSync(join(o.directory, "cursor"), "r+");
    } catch (e) {
      throw new PersistentQueueError(o.directory, `cannot use the queue directory: ${(e as Error).message}`);
    }
    this.#recover();
    this.#openSegment();
    if (this.#fsyncMs > 0) {
      this.#timer = setInterval(() => this.sync(), this.#fsyncMs);
      this.#timer.unref?.();
    }
  }

  /** Whether appends fail for lack of space now (false again once done batches freed space, until the next failure). */
  get diskFull(): boolean {
    return this.#diskFull && !this.#retryAppend && performance.now() - this.#fullSince < DISK_FULL_RETRY_MS;
  }

  /** The committed sequence number (records below it are done with). */
  get committed(): number {
    return this.#committed;
  }

  /** Appends the item to the log, then queues it; `disk_full` when it could not be written (nothing queued). */
  override offer(item: EncodedItem): OfferResult {
    if (this.size >= this.capacity) return "queue_full";
    if (this.bytes + queuedBytes(item) > this.memLimitBytes) return "mem_limit";
    if (!this.#append(item)) return "disk_full";
    const r = super.offer(item);
    this.#seqs.push(this.#nextSeq);
    this.#nextSeq++;
    return r;
  }

  /** Takes items for a batch; they stay on disk until done(batch). */
  override take(n: number): EncodedItem[] {
    const out = super.take(n);
    if (out.length) {
      this.#outstanding.set(out, this.#seqs[this.#seqHead]!);
      this.#seqHead += out.length;
      if (this.#seqHead > 4096 && this.#seqHead * 2 > this.#seqs.length) {
        this.#seqs = this.#seqs.slice(this.#seqHead);
        this.#seqHead = 0;
      }
    }
    return out;
  }

  /** The batch (as returned by take) was exported or dropped for good: its records may go. Idempotent. */
  done(batch: readonly EncodedItem[]): void {
    if (!this.#outstanding.delete(batch)) return;
    this.#advance();
  }

  /** Flushes written records to stable storage (fsync). */
  sync(): void {
    if (!this.#dirty || this.#fd < 0) return;
    this.#dirty = false;
    try {
      fsyncSync(this.#fd);
      fsyncSync(this.#cursorFd);
    } catch {
      this.#dirty = true;
    }
  }

  /** Syncs and closes the files; items not done with stay on disk for the next start. Idempotent. */
  close(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#dirty = true;
    this.sync();
    for (const fd of [this.#fd, this.#cursorFd]) if (fd >= 0) closeSync(fd);
    this.#fd = -1;
    this.#cursorFd = -1;
  }

  #append(item: EncodedItem): boolean {
    if (this.#fd < 0) this.#openSegment();
    if (this.#fd < 0) return this.#full("cannot create a segment: no space");
    const defs: Buffer[] = [];
    const S = this.#refer(item.scope, defs);
    const R = this.#refer(item.resource, defs);
    const meta = Buffer.from(JSON.stringify({ S, R, m: item.metric, k: item.metricKey, p: item.profile }, replacer));
    const payloadBytes = 4 + item.bytes.length + meta.length;
    const itemRec = Buffer.allocUnsafe(RECORD_HEADER_BYTES + payloadBytes);
    itemRec.writeUInt32LE(payloadBytes, 0);
    itemRec.writeUInt32LE(item.bytes.length, RECORD_HEADER_BYTES);
    itemRec.set(item.bytes, RECORD_HEADER_BYTES + 4);
    meta.copy(itemRec, RECORD_HEADER_BYTES + 4 + item.bytes.length);
    itemRec.writeUInt32LE(Bun.hash.crc32(itemRec.subarray(RECORD_HEADER_BYTES)) >>> 0, 4);
    // Definitions and the item go in one write: a failed append leaves neither behind.
    const rec = defs.length === 0 ? itemRec : Buffer.concat([...defs, itemRec]);
    let written = 0;
    try {
      while (written < rec.length) written += writeSync(this.#fd, rec, written, rec.length - written);
    } catch (e) {
      if (written > 0) {
        try {
          ftruncateSync(this.#fd, this.#fdBytes);
        } catch {
          /* the torn record is cut at the next start */
        }
      }
      if (!isDiskFull(e)) throw e;
      return this.#full((e as Error).message);
    }
    if (this.#diskFull) {
      this.#diskFull = false;
      this.#retryAppend = false;
      this.#onDiskFull?.(false, "");
    }
    for (const d of defs) this.#defined.add(d.readUInt32LE(RECORD_HEADER_BYTES + 4));
    this.#fdBytes += rec.length;
    this.#dirty = true;
    if (this.#fsyncMs === 0) this.sync();
    if (this.#fdBytes >= SEGMENT_BYTES) this.#openSegment();
    return true;
  }

  #full(error: string): false {
    this.#retryAppend = false;
    this.#fullSince = performance.now();
    if (!this.#diskFull) {
      this.#diskFull = true;
      this.#onDiskFull?.(true, error);
    }
    return false;
  }

  #advance(): void {
    let low = this.#seqHead < this.#seqs.length ? this.#seqs[this.#seqHead]! : this.#nextSeq;
    for (const first of this.#outstanding.values()) if (first < low) low = first;
    if (low <= this.#committed) return;
    this.#committed = low;
    const buf = Buffer.alloc(CURSOR_BYTES);
    buf.writeBigUInt64LE(BigInt(low), 0);
    buf.writeUInt32LE(Bun.hash.crc32(buf.subarray(0, 8)) >>> 0, 8);
    try {
      writeSync(this.#cursorFd, buf, 0, CURSOR_BYTES, 0);
      this.#dirty = true;
    } catch {
      /* the cursor stays behind: more is replayed after a crash, nothing is lost */
    }
    // Everything written is done with: begin a new segment so that the old ones (and their space) can go.
    if (low === this.#nextSeq && (this.#fdBytes > 0 || this.#fd < 0)) this.#openSegment();
    // Segments whose successor begins at or below the cursor hold nothing that is needed any more.
    let freed = false;
    while (this.#segments.length > 1 && this.#segments[1]!.first <= low) {
      const gone = this.#segments.shift()!;
      rmSync(gone.path, { force: true });
      freed = true;
    }
    // Space came back: let the next offer try to write again (diskFull clears on its success).
    if (freed && this.#diskFull) this.#retryAppend = true;
  }

  #openSegment(): void {
    if (this.#fd >= 0) {
      try {
        fsyncSync(this.#fd);
      } catch {
        /* best effort before rotation */
      }
      closeSync(this.#fd);
    }
    const path = join(this.#dir, `seg-${String(this.#nextSeq).padStart(20, "0")}.log`);
    try {
      this.#fd = openSync(path, "a");
    } catch (e) {
      this.#fd = -1;
      if (!isDiskFull(e)) throw new PersistentQueueError(this.#dir, `cannot create a segment: ${(e as Error).message}`);
      return;
    }
    this.#fdBytes = 0;
    if (path !== this.#definedPath) {
      this.#defined = new Set();
      this.#definedPath = path;
    }
    if (this.#segments.at(-1)?.first === this.#nextSeq) return;
    this.#segments.push({ first: this.#nextSeq, path });
  }

  #readCursor(): number {
    const buf = Buffer.alloc(CURSOR_BYTES);
    let n = 0;
    try {
      n = readSync(this.#cursorFd, buf, 0, CURSOR_BYTES, 0);
    } catch {
      return 0;
    }
    if (n < CURSOR_BYTES) return 0;
    if ((Bun.hash.crc32(buf.subarray(0, 8)) >>> 0) !== buf.readUInt32LE(8)) return 0;
    return Number(buf.readBigUInt64LE(0));
  }

  #recover(): void {
    const cursor = this.#readCursor();
    this.#committed = cursor;
    const files = readdirSync(this.#dir)
      .filter((f) => /^seg-\d{20}\.log$/.test(f))
      .sort();
    let next = cursor;
    for (const f of files) {
      const first = Number(f.slice(4, 24));
      const path = join(this.#dir, f);
      const data = readFileSync(path);
      let at = 0;
      let seq = first;
      const definitions = new Map<number, unknown>();
      while (at + RECORD_HEADER_BYTES <= data.length) {
        const len = data.readUInt32LE(at);
        const end = at + RECORD_HEADER_BYTES + len;
        if (len < 4 || end > data.length) break;
        const payload = data.subarray(at + RECORD_HEADER_BYTES, end);
        if ((Bun.hash.crc32(payload) >>> 0) !== data.readUInt32LE(at + 4)) break;
        at = end;
        if (payload.readUInt32LE(0) === DEFINITION) {
          if (payload.length >= 8) definitions.set(payload.readUInt32LE(4), JSON.parse(payload.subarray(8).toString("utf8"), reviver));
          continue;
        }
        if (seq >= cursor) this.#restore(payload, seq, definitions);
        seq++;
      }
      if (at < data.length) {
        this.truncatedRecords++;
        const fd = openSync(path, "r+");
        try {
          ftruncateSync(fd, at);
        } finally {
          closeSync(fd);
        }
      }
      next = Math.max(next, seq);
      this.#segments.push({ first, path });
    }
    this.#nextSeq = next;
    // Drop fully consumed segments now (those followed by one that starts at or below the cursor).
    while (this.#segments.length > 1 && this.#segments[1]!.first <= cursor) rmSync(this.#segments.shift()!.path, { force: true });
    if (this.#segments.length === 1 && this.#nextSeq <= cursor) rmSync(this.#segments.shift()!.path, { force: true });
  }

  /** The id of a resource or scope object; its definition record is added to `defs` when this segment lacks it. */
  #refer(v: object | undefined, defs: Buffer[]): number | undefined {
    if (v === undefined) return undefined;
    let id = this.#ids.get(v);
    if (id === undefined) {
      id = this.#nextId++;
      this.#ids.set(v, id);
    }
    if (!this.#defined.has(id) && !defs.some((d) => d.readUInt32LE(RECORD_HEADER_BYTES + 4) === id)) {
      const json = Buffer.from(JSON.stringify(v, replacer));
      const d = Buffer.allocUnsafe(RECORD_HEADER_BYTES + 8 + json.length);
      d.writeUInt32LE(8 + json.length, 0);
      d.writeUInt32LE(DEFINITION, RECORD_HEADER_BYTES);
      d.writeUInt32LE(id, RECORD_HEADER_BYTES + 4);
      json.copy(d, RECORD_HEADER_BYTES + 8);
      d.writeUInt32LE(Bun.hash.crc32(d.subarray(RECORD_HEADER_BYTES)) >>> 0, 4);
      defs.push(d);
    }
    return id;
  }

  #intern<T>(v: T): T {
    if (v === undefined || v === null) return v;
    const key = JSON.stringify(v, replacer);
    const seen = this.#interned.get(key);
    if (seen !== undefined) return seen as T;
    if (this.#interned.size >= MAX_INTERNED) this.#interned.clear();
    this.#interned.set(key, v);
    return v;
  }

  #restore(payload: Buffer, seq: number, definitions: ReadonlyMap<number, unknown>): void {
    const n = payload.readUInt32LE(0);
    const bytes = new Uint8Array(payload.subarray(4, 4 + n));
    const meta = JSON.parse(payload.subarray(4 + n).toString("utf8"), reviver) as {
      s?: Scope;
      r?: Attributes;
      S?: number;
      R?: number;
      m?: EncodedItem["metric"];
      k?: string;
      p?: EncodedItem["profile"];
    };
    const scope = meta.S !== undefined ? (definitions.get(meta.S) as Scope | undefined) : meta.s;
    const resource = meta.R !== undefined ? (definitions.get(meta.R) as Attributes | undefined) : meta.r;
    const item: EncodedItem = { bytes, scope: this.#intern(scope), resource: this.#intern(resource) };
    if (meta.m !== undefined) item.metric = meta.m;
    if (meta.k !== undefined) item.metricKey = meta.k;
    if (meta.p !== undefined) {
      item.profile = meta.p;
      item.size = estimateProfileBytes(meta.p);
    }
    const r = super.offer(item);
    if (r === "queue_full" || r === "mem_limit") {
      this.restoredDropped[r]++;
      return;
    }
    this.#seqs.push(seq);
    this.restored++;
  }
}
