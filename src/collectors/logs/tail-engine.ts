/**
 * The log tailer of one configuration: finds files, reads them in rounds, turns lines into OTLP log records,
 * hands them to the pipeline as fast as it accepts them (pausing reads while it does not), and checkpoints read
 * positions. One instance per configuration; a reload replaces it.
 *
 * Checkpoint rule: an offset is written only after the records up to it were accepted by the pipeline and a
 * pipeline flush that started after that completed within its deadline (no records are offered meanwhile). A graceful stop (SIGTERM) therefore
 * resumes exactly where it left off; after a crash (SIGKILL) the lines accepted since the last checkpoint are
 * read again (at-least-once: duplicates are possible, loss is not). An offset never passes the start of a record still
 * being assembled (partial CRI/Docker lines, a multiline record): it is read again and sent whole after a restart;
 * the lines of other streams past that offset that were sent already are skipped then (CheckpointEntry.streams).
 */
import type { LogsConfig } from "./config";
import { msOf, bytesOf } from "../../config/units";
import type { LogRecordItem, Scope } from "../../export/model";
import type { Attributes, TelemetryPipeline } from "../../export/types";
import type { WorkloadDirectory } from "../../discovery/types";
import type { Logger } from "../../log/logger";
import type { LOG_TRUNCATION_REASONS } from "../../telemetry/metrics";
import { readCheckpoint, writeCheckpoint, type CheckpointEntry } from "./checkpoint";
import { readMessage } from "./message";
import { MultilineAssembler, ruleFor, type AssembledRecord, type LogicalLine, type MultilineRule } from "./multiline";
import { parseLine, type ParsedLine } from "./parse";
import { attributesOfPath, containerIdOfPath, expandGlobs } from "./paths";
import { FileTailer, fileKey } from "./tailer";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { hostname } from "node:os";
import { containerIdentityAttributes } from "../../workloads/identity";

const HOST_NAME = hostname();

const READ_BUFFER_BYTES = 256 * 1024;
/** Most bytes read from one file per round, so that one busy file does not starve the others. */
const MAX_BYTES_PER_FILE_ROUND = 1024 * 1024;
/** Records read but not yet accepted by the pipeline; reading pauses above this. */
const MAX_PENDING_RECORDS = 8192;
/** Delay before offering again when the pipeline had no room. */
const BACKPRESSURE_RETRY_MS = 20;
/** Polls with nothing new before a drained (rotated or deleted) file is closed. */
const DRAIN_IDLE_POLLS = 2;
/** Longest flush a checkpoint waits for (the queue may hold a full capacity of records to export first). */
const CHECKPOINT_FLUSH_TIMEOUT_MS = 5000;
const NS_PER_MS = 1_000_000n;

export const LOGS_SCOPE: Scope = { name: "svc-agent/logs" };

interface Pending {
  item: LogRecordItem;
  tailer: FileTailer;
  generation: number;
  /** Offset the tailer's `committed` may move to once the item is accepted. */
  commit: number;
  /** The per-stream offsets past `commit` that go with it. */
  streams: Record<string, number> | undefined;
}

/** A multi-line message being assembled from partial lines of one stream. */
interface PartialGroup {
  parts: string[];
  bytes: number;
  startOffset: number;
  first: ParsedLine;
}

type StreamKey = "stdout" | "stderr" | "none";
const STREAM_KEYS: readonly StreamKey[] = ["stdout", "stderr", "none"];

interface TailedFile {
  tailer: FileTailer;
  resource: Attributes;
  attributes: Record<StreamKey, Attributes>;
  partials: Map<StreamKey, PartialGroup>;
  /** The multiline rule of this file, if one matches its path. */
  rule: MultilineRule | undefined;
  /** Records being joined, per stream (only with a rule). */
  records: Map<StreamKey, MultilineAssembler>;
  /** Offset after the last complete line read (every line before it belongs to a record sent or in progress). */
  lastEnd: number;
  /** After a restart: per stream, lines starting before this offset were sent already (skipped once). */
  skip: Map<string, number> | undefined;
  /** The largest offset in `skip` (it is dropped once reading passes it). */
  skipUntil: number;
}

/** Why a record was cut short: a line at max_line_size, or lines dropped at a multiline bound. */
export type TruncationReason = (typeof LOG_TRUNCATION_REASONS)[number];

export interface TailEngineDeps {
  config: LogsConfig;
  pipeline: TelemetryPipeline;
  workloads: WorkloadDirectory | undefined;
  logger: Logger;
  /** Called when the engine's health changes (checkpoint unwritable, files unreadable...). */
  onProblem?: (problem: string | undefined) => void;
  /** Called once per record cut short, per reason (the agent counts them in logs_truncated_total). */
  onTruncated?: (reason: TruncationReason) => void;
}

/** Figures for tests and benchmarks. */
export interface TailEngineStats {
  /** Poll rounds completed (each checks rotations, reads what is new and offers it). */
  rounds: number;
  files: number;
  linesRead: number;
  recordsAccepted: number;
  pending: number;
  checkpointsWritten: number;
  backpressurePauses: number;
  /** Records cut short, by reason. */
  truncated: Record<TruncationReason, number>;
  /** Records made of more than one line by a multiline rule. */
  multilineRecords: number;
}

export class TailEngine {
  readonly #c: LogsConfig;
  readonly #pipeline: TelemetryPipeline;
  readonly #workloads: WorkloadDirectory | undefined;
  readonly #logger: Logger;
  readonly #onProblem: (p: string | undefined) => void;
  readonly #onTruncated: (reason: TruncationReason) => void;
  readonly #rules: MultilineRule[];
  readonly #files = new Map<string, TailedFile>();
  readonly #pending: Pending[] = [];
  readonly #buf = Buffer.allocUnsafe(READ_BUFFER_BYTES);
  readonly #maxLine: number;
  readonly #pollMs: number;
  readonly #rescanMs: number;
  readonly #checkpointMs: number;
  readonly #stop = new AbortController();
  #loop: Promise<void> | undefined;
  #checkpointLoop: Promise<void> | undefined;
  #nextRescan = 0;
  #nowNs = 0n;
  #wake: (() => void) | undefined;
  #checkpointBusy: Promise<void> = Promise.resolve();
  #flushing = false;
  #lastCheckpointError: string | undefined;
  readonly stats: TailEngineStats = {
    rounds: 0,
    files: 0,
    linesRead: 0,
    recordsAccepted: 0,
    pending: 0,
    checkpointsWritten: 0,
    backpressurePauses: 0,
    truncated: { max_line_size: 0, max_lines: 0, max_bytes: 0 },
    multilineRecords: 0,
  };

  constructor(deps: TailEngineDeps) {
    this.#c = deps.config;
    this.#pipeline = deps.pipeline;
    this.#workloads = deps.workloads;
    this.#logger = deps.logger;
    this.#onProblem = deps.onProblem ?? (() => {});
    this.#onTruncated = deps.onTruncated ?? (() => {});
    this.#rules = deps.config.multiline.map((r, index) => ({
      index,
      include: r.include.map((g) => new Bun.Glob(g)),
      start: new RegExp(r.start_pattern),
      maxLines: r.max_lines,
      maxBytes: bytesOf(r, "max_bytes"),
      flushTimeoutMs: msOf(r, "flush_timeout"),
    }));
    this.#maxLine = bytesOf(deps.config, "max_line_size");
    this.#pollMs = msOf(deps.config, "poll_interval");
    this.#rescanMs = msOf(deps.config, "rescan_interval");
    this.#checkpointMs = msOf(deps.config, "checkpoint_interval");
  }

  /** Reads the checkpoint, opens the files found now, and starts reading in the background. Throws CheckpointError. */
  start(): void {
    const saved = readCheckpoint(this.#c.checkpoint_file);
    const seen = new Set<string>();
    for (const path of expandGlobs(this.#c.include, this.#c.exclude)) {
      const key = fileKey(path);
      if (!key || seen.has(key)) continue;
      seen.add(key);
      const entry = saved.get(key);
      let offset = this.#c.start_at === "end" ? undefined : 0;
      let resumed = false;
      const f = this.#open(path, key, (t) => {
        if (entry && matchesHead(t, entry)) {
          resumed = entry.offset <= t.size();
          return resumed ? entry.offset : 0;
        }
        return offset ?? t.size();
      });
      if (f && entry && resumed) this.#resume(f, entry);
    }
    // Files rotated away while the agent was stopped: find them by inode next to their old path and drain them.
    for (const entry of saved.values()) {
      if (seen.has(entry.key)) continue;
      const moved = findByKey(dirname(entry.path), entry.key);
      // Still at its old path but no longer included (the patterns changed): not a rotation, leave it.
      if (!moved || moved === entry.path) continue;
      const t = this.#open(moved, entry.key, (t) => (matchesHead(t, entry) && entry.offset <= t.size() ? entry.offset : -1));
      if (t) {
        t.tailer.draining = true;
        this.#resume(t, entry);
      }
    }
    this.#nextRescan = Date.now() + this.#rescanMs;
    this.#loop = this.#run();
    this.#checkpointLoop = this.#runCheckpoints();
  }

  /** Stops reading, offers what is pending once more, then writes the final checkpoint (bounded by `deadlineMs`). Idempotent. */
  async stop(deadlineMs: number): Promise<void> {
    if (this.#stop.signal.aborted) return this.#checkpointBusy;
    this.#stop.abort();
    this.#wake?.();
    await this.#loop;
    await this.#checkpointLoop;
    this.#offer();
    await this.#checkpoint(Math.max(1, deadlineMs));
    for (const f of this.#files.values()) f.tailer.close();
    this.#files.clear();
  }

  /** Forces one checkpoint now (tests). */
  checkpointNow(timeoutMs = CHECKPOINT_FLUSH_TIMEOUT_MS): Promise<void> {
    return this.#checkpoint(timeoutMs);
  }

  #open(path: string, key: string, offsetOf: (t: FileTailer) => number): TailedFile | undefined {
    let tailer: FileTailer;
    try {
      tailer = new FileTailer(path, key, 0, this.#maxLine);
    } catch (e) {
      this.#logger.warn("cannot open log file", { path, error: (e as Error).message });
      return undefined;
    }
    const offset = offsetOf(tailer);
    if (offset < 0) {
      tailer.close();
      return undefined;
    }
    if (offset > 0) {
      tailer.close();
      tailer = new FileTailer(path, key, offset, this.#maxLine);
    }
    const f: TailedFile = {
      tailer,
      resource: {},
      attributes: { stdout: {}, stderr: {}, none: {} },
      partials: new Map(),
      rule: ruleFor(this.#rules, path),
      records: new Map(),
      lastEnd: tailer.offset,
      skip: undefined,
      skipUntil: 0,
    };
    this.#label(f);
    this.#files.set(key, f);
    this.stats.files = this.#files.size;
    return f;
  }

  /** A file resumed at its checkpoint entry: lines of a stream already sent past the entry's offset are skipped. */
  #resume(f: TailedFile, entry: CheckpointEntry): void {
    if (!entry.streams) return;
    f.tailer.committedStreams = entry.streams;
    f.skip = new Map(Object.entries(entry.streams));
    f.skipUntil = Math.max(...f.skip.values());
  }

  /** Resource: the container's workload identity (src/workloads) from what the path says, overlaid with what discovery knows of the container. */
  #label(f: TailedFile): void {
    const path = f.tailer.path;
    const id = containerIdOfPath(path);
    const known = id ? this.#workloads?.forContainer(id) : undefined;
    const resource = containerIdentityAttributes({ ...attributesOfPath(path), ...(known ?? {}) }, HOST_NAME);
    if (JSON.stringify(resource) !== JSON.stringify(f.resource)) f.resource = resource;
    const base = { "log.file.path": path, "log.file.name": path.slice(path.lastIndexOf("/") + 1) };
    f.attributes = { stdout: { ...base, "log.iostream": "stdout" }, stderr: { ...base, "log.iostream": "stderr" }, none: base };
  }

  async #run(): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      try {
        const now = Date.now();
        if (now >= this.#nextRescan) {
          this.#rescan();
          this.#nextRescan = now + this.#rescanMs;
        }
        this.#checkRotations();
        let busy = false;
        // Read rounds while there is data and room; yield to the event loop between rounds.
        for (;;) {
          this.#offer();
          if (this.#pending.length >= MAX_PENDING_RECORDS) {
            this.stats.backpressurePauses++;
            break;
          }
          const read = this.#readRound();
          this.#offer();
          if (read === 0) break;
          busy = true;
          await new Promise((r) => setImmediate(r));
          if (signal.aborted) return;
        }
        this.#flushIdle();
        this.#offer();
        this.stats.rounds++;
        const blocked = this.#pending.length > 0;
        await this.#sleep(blocked ? BACKPRESSURE_RETRY_MS : busy ? 0 : this.#pollMs);
      } catch (e) {
        this.#logger.error("log tailer round failed", { error: (e as Error).message });
        await this.#sleep(this.#pollMs);
      }
    }
  }

  #sleep(ms: number): Promise<void> {
    if (this.#stop.signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this.#wake = done;
    });
  }

  #rescan(): void {
    for (const path of expandGlobs(this.#c.include, this.#c.exclude)) {
      const key = fileKey(path);
      if (!key) continue;
      const known = this.#files.get(key);
      if (known) {
        this.#label(known);
        continue;
      }
      // A file that appears while running is read from its beginning.
      this.#open(path, key, () => 0);
    }
  }

  /** A path whose inode changed was rotated (rename + create): drain the old file, open the new one from 0. */
  #checkRotations(): void {
    for (const f of [...this.#files.values()]) {
      const t = f.tailer;
      if (t.draining) continue;
      const now = fileKey(t.path);
      if (now === t.key) continue;
      t.draining = true;
      if (now && !this.#files.has(now)) this.#open(t.path, now, () => 0);
    }
  }

  /** Reads one round over every file; returns the bytes read. */
  #readRound(): number {
    let total = 0;
    for (const f of [...this.#files.values()]) {
      if (this.#pending.length >= MAX_PENDING_RECORDS) break;
      const t = f.tailer;
      this.#nowNs = BigInt(Date.now()) * NS_PER_MS;
      const n = t.read(this.#buf, MAX_BYTES_PER_FILE_ROUND, (text, start, end, truncated) => this.#line(f, text, start, end, truncated));
      if (n < 0) {
        f.partials.clear();
        this.#flushRecords(f);
        f.lastEnd = 0;
        f.skip = undefined;
        this.#logger.info("log file truncated; reading it again from the start", { path: t.path });
        continue;
      }
      total += n;
      if (t.draining) {
        if (n > 0) t.idlePolls = 0;
        else if (++t.idlePolls >= DRAIN_IDLE_POLLS && (this.#flushRecords(f), !this.#pending.some((p) => p.tailer === t))) {
          t.close();
          this.#files.delete(t.key);
          this.stats.files = this.#files.size;
        }
      }
    }
    return total;
  }

  /** Turns one line into a record (or part of one); false once the pending limit is reached (reading pauses). */
  #line(f: TailedFile, text: string, start: number, end: number, truncated: boolean): boolean {
    this.stats.linesRead++;
    f.lastEnd = end;
    const p = parseLine(text, this.#c.format);
    const streamKey: StreamKey = p.stream ?? "none";
    if (f.skip) {
      if (start < (f.skip.get(streamKey) ?? 0)) return true;
      if (end >= f.skipUntil) f.skip = undefined;
    }
    let message = p.message;
    let first = p;
    let cut = truncated;
    let lineStart = start;
    const group = f.partials.get(streamKey);
    if (p.partial) {
      if (group) {
        if (group.bytes < this.#maxLine) group.parts.push(message);
        group.bytes += message.length;
      } else f.partials.set(streamKey, { parts: [message], bytes: message.length, startOffset: start, first: p });
      return true;
    }
    if (group) {
      f.partials.delete(streamKey);
      group.parts.push(message);
      message = group.parts.join("");
      first = group.first;
      lineStart = group.startOffset;
      if (group.bytes + p.message.length > this.#maxLine) {
        message = message.slice(0, this.#maxLine);
        cut = true;
      }
    }
    const line: LogicalLine = { message, parsed: first, start: lineStart, end, cut, readAtNs: this.#nowNs };
    const generation = f.tailer.generation;
    if (!f.rule) {
      this.#emit(f, streamKey, { body: message, first: line, end, lines: 1, lineCut: cut, truncated: undefined, generation });
    } else {
      let assembler = f.records.get(streamKey);
      if (!assembler) f.records.set(streamKey, (assembler = new MultilineAssembler(f.rule)));
      const done = assembler.push(line, Date.now(), generation);
      if (done) this.#emit(f, streamKey, done);
    }
    return this.#pending.length < MAX_PENDING_RECORDS;
  }

  /**
   * Queues a finished record for the pipeline. Its commit offset is the end of the last line read, or the start of
   * the earliest record still being assembled (partial CRI/Docker lines, multiline) when that is earlier.
   */
  #emit(f: TailedFile, streamKey: StreamKey, r: AssembledRecord): void {
    const first = r.first;
    // Per stream: where its lines stop being sent (its record in progress, else everything read).
    const sentUntil: Partial<Record<StreamKey, number>> = {};
    for (const [k, g] of f.partials) sentUntil[k] = Math.min(sentUntil[k] ?? g.startOffset, g.startOffset);
    for (const [k, a] of f.records) if (a.startOffset !== undefined) sentUntil[k] = Math.min(sentUntil[k] ?? a.startOffset, a.startOffset);
    let commit = f.lastEnd;
    for (const v of Object.values(sentUntil)) commit = Math.min(commit, v);
    let streams: Record<string, number> | undefined;
    if (commit < f.lastEnd)
      for (const k of STREAM_KEYS) {
        const until = sentUntil[k] ?? f.lastEnd;
        if (until > commit) (streams ??= {})[k] = until;
      }
    const cut = r.lineCut || r.truncated !== undefined;
    if (r.lineCut) this.#truncated("max_line_size");
    if (r.truncated) this.#truncated(r.truncated);
    if (r.lines > 1) this.stats.multilineRecords++;
    const item: LogRecordItem = {
      scope: LOGS_SCOPE,
      resource: f.resource,
      observedTimeUnixNano: first.readAtNs,
      body: r.body,
      attributes: cut ? { ...f.attributes[streamKey], "log.truncated": true } : f.attributes[streamKey],
    };
    const fields = readMessage(first.message);
    const time = first.parsed.timeUnixNano ?? fields.timeUnixNano;
    if (time !== undefined) item.timeUnixNano = time;
    if (this.#c.severity === "auto") {
      if (fields.severityNumber !== undefined) item.severityNumber = fields.severityNumber;
      if (fields.severityText !== undefined) item.severityText = fields.severityText;
    }
    if (fields.traceId) {
      item.traceId = fields.traceId;
      if (fields.spanId) item.spanId = fields.spanId;
      if (fields.traceFlags !== undefined) item.flags = fields.traceFlags;
    }
    this.#pending.push({ item, tailer: f.tailer, generation: r.generation, commit, streams });
  }

  #truncated(reason: TruncationReason): void {
    this.stats.truncated[reason]++;
    this.#onTruncated(reason);
  }

  /** Ends the multiline records of files read to their end that had no new line for their rule's flush timeout. */
  #flushIdle(): void {
    const now = Date.now();
    for (const f of this.#files.values()) {
      if (![...f.records.values()].some((a) => a.startOffset !== undefined) || f.tailer.offset < f.tailer.size()) continue;
      for (const [stream, a] of f.records) {
        const done = a.flushIfIdle(now);
        if (done) this.#emit(f, stream, done);
      }
    }
  }

  /** Ends every multiline record of a file now (it is closing, or was truncated). */
  #flushRecords(f: TailedFile): void {
    for (const [stream, a] of f.records) {
      const done = a.flush();
      if (done) this.#emit(f, stream, done);
    }
  }

  /**
   * Offers pending records: as many as the pipeline has room for; the rest wait (reading pauses meanwhile).
   * Through the pipeline's offer() (a prefix is taken, the refused rest is not counted) so that a record
   * refused for queue_full, mem_limit or disk_full and offered again is counted collected once; submit()
   * would count it collected and dropped at every refusal.
   */
  #offer(): void {
    if (this.#pending.length === 0 || this.#flushing) return;
    let n = this.#pending.length;
    const room = this.#pipeline.room?.("logs");
    if (room !== undefined) n = Math.min(n, Math.max(0, room));
    if (n > 0) {
      const batch = new Array<LogRecordItem>(n);
      for (let i = 0; i < n; i++) batch[i] = this.#pending[i]!.item;
      // offer() counts only what it takes: a refused record offered again later is counted once, when taken.
      const accepted = this.#pipeline.offer ? this.#pipeline.offer("logs", batch) : this.#pipeline.submit("logs", batch);
      for (let i = 0; i < accepted; i++) {
        const p = this.#pending[i]!;
        if (p.tailer.generation === p.generation && p.commit >= p.tailer.committed) {
          p.tailer.committed = p.commit;
          p.tailer.committedStreams = p.streams;
        }
      }
      this.#pending.splice(0, accepted);
      this.stats.recordsAccepted += accepted;
    }
    this.stats.pending = this.#pending.length;
  }

  async #runCheckpoints(): Promise<void> {
    while (!this.#stop.signal.aborted) {
      await delay(this.#checkpointMs, this.#stop.signal);
      if (this.#stop.signal.aborted) return;
      await this.#checkpoint(CHECKPOINT_FLUSH_TIMEOUT_MS);
    }
  }

  /** Snapshot of accepted offsets -> flush -> write when the flush finished in time. One at a time. */
  #checkpoint(timeoutMs: number): Promise<void> {
    const run = this.#checkpointBusy.then(async () => {
      const snapshot: CheckpointEntry[] = [];
      for (const f of this.#files.values()) {
        const t = f.tailer;
        if (t.closed) continue;
        const entry: CheckpointEntry = { path: t.path, key: t.key, offset: t.committed, head: t.head() };
        if (t.committedStreams) entry.streams = t.committedStreams;
        snapshot.push(entry);
      }
      // Offers pause during the flush, so that a steady stream of lines cannot keep the queues from draining.
      const started = performance.now();
      this.#flushing = true;
      try {
        await this.#pipeline.flush(timeoutMs);
      } finally {
        this.#flushing = false;
      }
      if (performance.now() - started >= timeoutMs) {
        this.#problem(`pipeline flush did not finish within ${timeoutMs} ms; checkpoint not advanced`);
        return;
      }
      try {
        writeCheckpoint(this.#c.checkpoint_file, snapshot);
        this.stats.checkpointsWritten++;
        this.#problem(undefined);
      } catch (e) {
        this.#problem(`cannot write checkpoint file ${this.#c.checkpoint_file}: ${(e as Error).message}`);
      }
    });
    this.#checkpointBusy = run.catch(() => {});
    return run;
  }

  #problem(p: string | undefined): void {
    if (p === this.#lastCheckpointError) return;
    this.#lastCheckpointError = p;
    if (p) this.#logger.warn(p);
    this.#onProblem(p);
  }
}

function matchesHead(t: FileTailer, entry: CheckpointEntry): boolean {
  const now = Buffer.from(t.head(), "base64");
  const saved = Buffer.from(entry.head, "base64");
  // The file may have grown since; the saved head must be a prefix of (or equal to) the current one.
  return saved.length <= now.length && now.subarray(0, saved.length).equals(saved);
}

function findByKey(dir: string, key: string): string | undefined {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return undefined;
  }
  for (const n of names) if (fileKey(join(dir, n)) === key) return join(dir, n);
  return undefined;
}

/** Resolves after `ms`, or at once when `signal` aborts (the listener is removed either way). */
function delay(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(t);
      resolve();
    };
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
