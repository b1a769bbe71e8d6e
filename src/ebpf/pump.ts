/**
 * Drains ring (or perf) buffer readers on the event loop without blocking it. One PollTicker per agent polls
 * every pump from one timer, so the wakeups per second do not grow with the number of rings (each wakeup of
 * the event loop costs Bun ~20-150 µs of CPU here: bench/ringbuf.ts, bench/findings.md). A poll reads at most
 * one batch per pump, handing each record straight to the set's decoder and event handler
 * (RecordReader.consumeDecoded: no closure, try or counter update per record; counters move once per batch).
 * Batches are bounded by time: a batch holds as many records as the previous turns' cost per record fits in
 * TURN_BUDGET_MS (between MIN_ and MAX_RECORDS_PER_BATCH), and the pumps whose batch filled get another one at
 * once (one setImmediate for all of them) so other work interleaves.
 * Each pump's poll interval follows its buffer's size, so that at the producer rate this machine reaches a ring
 * is at most a third full between polls, and adapts: it halves while polls find the ring more than a quarter
 * full and grows back while they find it nearly empty. After IDLE_POLLS_BEFORE_STRETCH polls in a row found the
 * ring nearly empty, it stretches to the time the peak producer takes to fill half the ring (33 ms for 16 MiB):
 * a burst starting right after a poll then leaves the ring at most half full at the next one, which finds it
 * busy and halves the interval, while the pump reads records ten times faster than the peak producer writes
 * them (bench/ringbuf.ts: 20-30 ns per record read, against ~300 ns between records at 3.3M records/s). The ticker's timer runs at the shortest
 * interval any pump wants, so one busy ring is polled as often as it needs and the others come along for free.
 * The timer is one setInterval re-armed only when that interval changes: no timer, closure or promise per poll.
 * Once QUIET_TICKS_BEFORE_WAIT ticks in a row found every ring nearly empty (less than IDLE_FILL_FRACTION
 * pending), the ticker waits instead (ffi/ring-wait.ts: epoll on the rings' fds in a thread of its own): the
 * kernel wakes the wait once a ring holds a sixteenth of its size (ffi/bpf/common.h svc_wakeup_flags), else it
 * ends after RING_WAIT_TIMEOUT_MS; each end polls every ring and waits again while they stay quiet, and a ring
 * found busier brings polling on the timer back. The timer meanwhile ticks every WAITING_POLL_INTERVAL_MS, the
 * fallback should the waiter stop. A quiet or idle agent then takes a wakeup per RING_WAIT_TIMEOUT_MS instead of
 * one per poll interval (each wakeup costs Bun 20-110 µs of CPU here).
 * A ring found more than SPILL_FILL_FRACTION full (its decoder fell behind: a cold JIT, a long collection, cores
 * shared with the load) is emptied into memory first (src/ebpf/spill.ts: a copy per record, far cheaper than
 * decoding it) and decoded from there, oldest first, while every later record goes the same way until the backlog
 * is gone, so that the ring stays below the three quarters at which the kernel stops forwarding HTTP/2 connections
 * (a stopped connection is decoded again only from a later call that starts with frames, its HPACK state partial). The backlog held is bounded (SPILL_RING_SIZES rings, at most
 * MAX_SPILL_BYTES) and takes nothing while the memory limiter refuses: past either, records wait in the ring as
 * before.
 */
import type { ReadinessWait } from "../../ffi/ring-wait";
import type { ReaderBinding } from "./loader";
import { SpillQueue } from "./spill";

/** Upper bound of a batch (records per turn). */
export const MAX_RECORDS_PER_BATCH = 65_536;
/** Lower bound of a batch, however slow the decoder. */
export const MIN_RECORDS_PER_BATCH = 64;
/**
 * Batch size before any turn was timed: the least, since the first records a set decodes run through code the JIT
 * has not compiled yet (a fresh agent's first 42 HTTP/2 records took 150 ms, the next ones ~50 µs each: a first
 * batch of 16,384 held the event loop while the ring filled to the point where the kernel stops HTTP/2 connections).
 */
const FIRST_BATCH_RECORDS = MIN_RECORDS_PER_BATCH;
/** Time a turn aims at (the longest the pump holds the event loop, give or take one record). */
export const TURN_BUDGET_MS = 2;
/**
 * A turn timed only when it handed at least this many records (shorter ones say little about the cost), or when it
 * took the whole budget; a full batch too short to time doubles the next one.
 */
const MIN_TIMED_RECORDS = 256;
/**
 * Producer rate the poll interval is sized for: a getppid storm into a ring nobody waits on reaches ~3.3M
 * records/s of 72 bytes here (bench/ringbuf.ts), ~240 MB/s.
 */
const PEAK_PRODUCER_BYTES_PER_MS = 250_000;
/** Share of the ring the peak producer may fill between two polls. */
const SAFE_FILL_FRACTION = 1 / 3;
/** A poll finding more than this share of the ring pending halves the interval. */
const BUSY_FILL_FRACTION = 1 / 4;
/** A poll finding less than this share pending lets the interval grow back (doubling) to its base. */
const IDLE_FILL_FRACTION = 1 / 16;
/** Share of the ring the peak producer may fill between two polls once the ring has been idle for a while. */
const IDLE_SAFE_FILL_FRACTION = 1 / 2;
/** Polls in a row finding the ring nearly empty (at its base interval) before the interval stretches. */
export const IDLE_POLLS_BEFORE_STRETCH = 8;
const MIN_POLL_INTERVAL_MS = 1;
const MAX_POLL_INTERVAL_MS = 25;
const MAX_IDLE_POLL_INTERVAL_MS = 50;
/** Timed ticks in a row that found every ring nearly empty before the ticker waits instead. */
export const QUIET_TICKS_BEFORE_WAIT = 4;
/** The longest a wait lasts when no ring fills to its wakeup share: the latency of a trickle of records. */
export const RING_WAIT_TIMEOUT_MS = 100;
/** While waiting the timer still ticks this often (the fallback should the waiter stop). */
export const WAITING_POLL_INTERVAL_MS = 1000;

/** A poll or batch finding more than this share of the ring pending moves the ring's records into memory first. */
export const SPILL_FILL_FRACTION = 1 / 2;
/** The backlog a pump holds in memory, in ring sizes... */
export const SPILL_RING_SIZES = 8;
/** ...and at most this many bytes. */
export const MAX_SPILL_BYTES = 64 * 2 ** 20;

/** Bytes of backlog a pump of a ring of `sizeBytes` holds in memory at most. */
export function spillLimitBytes(sizeBytes: number): number {
  return Math.min(MAX_SPILL_BYTES, SPILL_RING_SIZES * sizeBytes);
}

/** Base poll interval for a buffer of `sizeBytes`: the time the peak producer takes to fill a third of it. */
export function pollIntervalMs(sizeBytes: number): number {
  const fillMs = (sizeBytes * SAFE_FILL_FRACTION) / PEAK_PRODUCER_BYTES_PER_MS;
  return Math.max(MIN_POLL_INTERVAL_MS, Math.min(MAX_POLL_INTERVAL_MS, Math.floor(fillMs)));
}

/**
 * Poll interval of a buffer of `sizeBytes` found idle for a while: the time the peak producer takes to fill half
 * of it (never shorter than the base interval).
 */
export function idlePollIntervalMs(sizeBytes: number): number {
  const fillMs = (sizeBytes * IDLE_SAFE_FILL_FRACTION) / PEAK_PRODUCER_BYTES_PER_MS;
  return Math.max(pollIntervalMs(sizeBytes), Math.min(MAX_IDLE_POLL_INTERVAL_MS, Math.floor(fillMs)));
}

/** Records a batch may hold so that a turn costing `nsPerRecord` per record stays within TURN_BUDGET_MS. */
export function batchRecords(nsPerRecord: number): number {
  if (!(nsPerRecord > 0)) return MAX_RECORDS_PER_BATCH;
  const fit = Math.floor((TURN_BUDGET_MS * 1e6) / nsPerRecord);
  return Math.max(MIN_RECORDS_PER_BATCH, Math.min(MAX_RECORDS_PER_BATCH, fit));
}

/**
 * Next poll interval from the current one and the share of the ring found pending at this poll: halved when
 * busy; when nearly empty doubled back to the base, and stretched to `idleMs` once `idlePolls` polls in a row
 * (this one included) found it so; back to the base as soon as a poll finds records there in some number.
 */
export function nextPollIntervalMs(currentMs: number, baseMs: number, pendingFraction: number, idleMs = baseMs, idlePolls = 0): number {
  if (pendingFraction > BUSY_FILL_FRACTION) return Math.max(MIN_POLL_INTERVAL_MS, Math.floor(Math.min(currentMs, baseMs) / 2));
  if (pendingFraction < IDLE_FILL_FRACTION) {
    if (currentMs < baseMs) return Math.min(baseMs, currentMs * 2);
    return idlePolls >= IDLE_POLLS_BEFORE_STRETCH ? idleMs : currentMs;
  }
  return Math.min(currentMs, baseMs);
}

export interface PumpCounters {
  /** Records decoded and handed on. */
  received: number;
  /** Records that did not decode (the decoder threw a RangeError: too short, unknown kind). */
  decodeErrors: number;
  /** Records whose decoder or event handler threw something else (the first per turn goes to onError). */
  handlerErrors: number;
  /** Turns taken (timer polls and immediate follow-ups). */
  turns: number;
  /** Longest turn, in milliseconds: the most the pump held the event loop at once. */
  longestTurnMs: number;
  /** Records moved out of the ring into memory before being decoded (its decoder had fallen behind). */
  spilled: number;
  /** Most bytes held in memory at once. */
  spillPeakBytes: number;
}

/** What the ticker polls: a RecordPump (tests may give fakes). */
export interface Pollable {
  /** Interval this pump wants until its next timed poll. */
  readonly currentIntervalMs: number;
  /** A timed poll: adapts the interval, reads a batch; true when the batch filled (more is waiting). */
  poll(): boolean;
  /** A follow-up batch right after one that filled; true when this one filled too. */
  followUp(): boolean;
  /** True when the last poll found the ring nearly empty (less than IDLE_FILL_FRACTION of it pending). */
  readonly quiet: boolean;
  /** A file descriptor epoll reports readable while records wait; without one the ticker never waits. */
  readonly pollFd?: number;
}

/** How the ticker waits for records while every ring is quiet. */
export interface TickerWaits {
  /** Opens the waiter at the first wait; a throw (logged through onUnavailable) leaves the ticker on its timer. */
  open(): ReadinessWait;
  onUnavailable?(reason: string): void;
}

/**
 * One timer for many pumps: every timed tick polls each pump once; the pumps whose batch filled get follow-up
 * batches in one setImmediate chain. The timer is a setInterval at the shortest interval any pump wants,
 * re-armed only when that changes, and stopped while no pump is added.
 */
export class PollTicker {
  readonly #pumps: Pollable[] = [];
  /** Pumps whose last batch filled, waiting for a follow-up. */
  #more: Pollable[] = [];
  #spare: Pollable[] = [];
  #timer: ReturnType<typeof setInterval> | undefined;
  #timerMs = 0;
  #immediate: ReturnType<typeof setImmediate> | undefined;
  /** Timed ticks taken (for tests and benchmarks: wakeups of the event loop this ticker caused, follow-ups aside). */
  ticks = 0;
  /** Waits for records the ticker started (tests, debugging). */
  waits = 0;
  /** Waits the kernel's wakeup ended (a ring reached its wakeup share). */
  wakeups = 0;
  /** Waits that ended at the waiter's timeout (or as it gave up). */
  timeouts = 0;
  readonly #onTimer = (): void => this.#tick();
  readonly #onImmediate = (): void => this.#followUps();
  readonly #onReady = (woken: boolean): void => this.#ready(woken);
  readonly #waits: TickerWaits | undefined;
  /** The waiter once opened; null when it could not be. */
  #waiter: ReadinessWait | null | undefined;
  #quietTicks = 0;
  #waiting = false;

  /** `waits`: how to wait for records while every ring is quiet (without it the ticker polls on its timer alone). */
  constructor(waits?: TickerWaits) {
    this.#waits = waits;
  }

  /** True while the ticker waits for the kernel's wakeup (its timer at WAITING_POLL_INTERVAL_MS). */
  get waiting(): boolean {
    return this.#waiting;
  }

  /** Pumps polled by this ticker. */
  get size(): number {
    return this.#pumps.length;
  }

  /** Interval of the timer now (0 when stopped). */
  get intervalMs(): number {
    return this.#timerMs;
  }

  add(pump: Pollable): void {
    if (this.#pumps.includes(pump)) return;
    this.#pumps.push(pump);
    this.#stopWaiting();
    this.#waiter?.reset?.();
    this.#arm();
  }

  remove(pump: Pollable): void {
    const i = this.#pumps.indexOf(pump);
    if (i >= 0) this.#pumps.splice(i, 1);
    const j = this.#more.indexOf(pump);
    if (j >= 0) this.#more.splice(j, 1);
    this.#stopWaiting();
    /* Its ring's fd may be closed and its number reused by the next set's ring. */
    this.#waiter?.reset?.();
    this.#arm();
  }

  #tick(): void {
    this.ticks++;
    const pumps = this.#pumps;
    let quiet = true;
    for (let i = 0; i < pumps.length; i++) {
      const p = pumps[i]!;
      if (p.poll() && !this.#more.includes(p)) this.#more.push(p);
      if (!p.quiet) quiet = false;
    }
    this.#quietTicks = quiet ? this.#quietTicks + 1 : 0;
    if (!quiet) this.#stopWaiting();
    else if (this.#quietTicks >= QUIET_TICKS_BEFORE_WAIT) this.#startWaiting();
    this.#arm();
    this.#scheduleFollowUps();
  }

  /** Hands the rings' fds to the waiter, when every pump has one and a waiter can be had. */
  #startWaiting(): void {
    if (this.#waiting || !this.#waits || this.#waiter === null) return;
    const fds: number[] = [];
    for (const p of this.#pumps) {
      if (p.pollFd === undefined) return;
      fds.push(p.pollFd);
    }
    if (this.#waiter === undefined) {
      try {
        this.#waiter = this.#waits.open();
      } catch (e) {
        this.#waiter = null;
        this.#waits.onUnavailable?.((e as Error).message);
        return;
      }
    }
    if (this.#waiter.broken) {
      this.#waits.onUnavailable?.(this.#waiter.broken);
      this.#waiter = null;
      return;
    }
    this.#waiting = true;
    this.waits++;
    this.#waiter.wait(fds, this.#onReady);
  }

  #stopWaiting(): void {
    if (!this.#waiting) return;
    this.#waiting = false;
    this.#quietTicks = 0;
    this.#waiter?.cancel();
  }

  /** A wait ended (woken by the kernel, or at its timeout): a tick now, which waits again if every ring is still quiet. */
  #ready(woken: boolean): void {
    if (!this.#waiting) return;
    if (woken) this.wakeups++;
    else this.timeouts++;
    this.#waiting = false;
    this.#quietTicks = QUIET_TICKS_BEFORE_WAIT - 1;
    if (this.#pumps.length > 0) this.#tick();
  }

  #followUps(): void {
    this.#immediate = undefined;
    const batch = this.#more;
    this.#more = this.#spare;
    for (let i = 0; i < batch.length; i++) {
      const p = batch[i]!;
      if (this.#pumps.includes(p) && p.followUp() && !this.#more.includes(p)) this.#more.push(p);
    }
    batch.length = 0;
    this.#spare = batch;
    this.#scheduleFollowUps();
  }

  #scheduleFollowUps(): void {
    if (this.#more.length > 0 && !this.#immediate) this.#immediate = setImmediate(this.#onImmediate);
  }

  /** (Re)starts the timer at the shortest interval a pump wants; stops everything when no pump is left. */
  #arm(): void {
    const pumps = this.#pumps;
    let want = 0;
    for (let i = 0; i < pumps.length; i++) {
      const ms = pumps[i]!.currentIntervalMs;
      if (want === 0 || ms < want) want = ms;
    }
    if (want > 0 && this.#waiting) want = WAITING_POLL_INTERVAL_MS;
    if (want === this.#timerMs) return;
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = want > 0 ? setInterval(this.#onTimer, want) : undefined;
    this.#timerMs = want;
    if (want === 0 && this.#immediate) {
      clearImmediate(this.#immediate);
      this.#immediate = undefined;
      this.#more.length = 0;
    }
  }
}

export class RecordPump<E> implements Pollable {
  readonly counters: PumpCounters = { received: 0, decodeErrors: 0, handlerErrors: 0, turns: 0, longestTurnMs: 0, spilled: 0, spillPeakBytes: 0 };
  /** Whether the backlog may grow now (false while the memory limiter refuses); set by the owner. */
  spillAllowed: () => boolean = () => true;
  readonly #spill = new SpillQueue();
  readonly #spillAt: number;
  readonly #spillLimit: number;
  readonly #toSpill = (view: DataView, offset: number, length: number): void => this.#spill.push(view, offset, length);
  /** Base poll interval (the ring's size at the peak producer rate). */
  readonly intervalMs: number;
  /** Interval once the ring was found nearly empty IDLE_POLLS_BEFORE_STRETCH polls in a row. */
  readonly idleIntervalMs: number;
  /** Called after each batch with the records read (for the events metric; once per batch, not per record). */
  onBatch: ((count: number) => void) | undefined;
  /** Called after each timed turn with its wall time and the records it handed out (bench/ringbuf.ts's turn percentiles). */
  onTurn: ((ms: number, records: number) => void) | undefined;
  #ticker: PollTicker | undefined;
  #closed = false;
  #currentIntervalMs: number;
  #idlePolls = 0;
  #quiet = true;
  #batchRecords = FIRST_BATCH_RECORDS;
  #failedInBatch = 0;
  #handlerErrorReported = false;
  readonly #onEvent: (event: E) => void;
  readonly #onRecordError: (error: unknown) => void;

  constructor(
    readonly binding: ReaderBinding<E>,
    onEvent: (event: E) => void,
    readonly onError: (error: Error) => void,
  ) {
    this.intervalMs = pollIntervalMs(binding.sizeBytes);
    this.idleIntervalMs = idlePollIntervalMs(binding.sizeBytes);
    this.#currentIntervalMs = this.intervalMs;
    this.#spillAt = binding.sizeBytes * SPILL_FILL_FRACTION;
    this.#spillLimit = spillLimitBytes(binding.sizeBytes);
    this.#onEvent = onEvent;
    this.#onRecordError = (error) => {
      this.#failedInBatch++;
      if (error instanceof RangeError) {
        this.counters.decodeErrors++;
        return;
      }
      this.counters.handlerErrors++;
      if (this.#handlerErrorReported) return;
      this.#handlerErrorReported = true;
      this.onError(error instanceof Error ? error : new Error(String(error)));
    };
  }

  /** Poll interval in use now (adapted to how full the ring was found). */
  get currentIntervalMs(): number {
    return this.#currentIntervalMs;
  }

  get quiet(): boolean {
    return this.#quiet;
  }

  get pollFd(): number | undefined {
    return this.binding.reader.pollFd;
  }

  /** Records a batch holds now (adapted to the measured cost per record). */
  get batchRecords(): number {
    return this.#batchRecords;
  }

  /** Starts polling on `ticker` (shared with other pumps), or on a ticker of its own. */
  start(ticker: PollTicker = new PollTicker()): void {
    if (this.#closed || this.#ticker) return;
    this.#ticker = ticker;
    ticker.add(this);
  }

  /** Records held in memory, read from the ring and not decoded yet. */
  get backlog(): number {
    return this.#spill.size;
  }

  /**
   * Reads at most one batch of what is available now, from the backlog held in memory when there is one. Returns
   * records read (0 only when the backlog and the ring are both empty).
   */
  drain(): number {
    if (this.#closed) return 0;
    this.#failedInBatch = 0;
    this.#handlerErrorReported = false;
    const reader = this.binding.reader;
    const pending = reader.pendingBytes?.() ?? 0;
    if (this.#spill.size > 0 || pending > this.#spillAt) this.#fillBacklog(pending);
    /* The backlog first: its records are older than any left in the ring. */
    let n: number;
    if (this.#spill.size > 0) n = this.#spill.take(this.binding.decode, this.#onEvent, this.#batchRecords, this.#onRecordError);
    else n = reader.consumeDecoded(this.binding.decode, this.#onEvent, this.#batchRecords, this.#onRecordError);
    const received = n - this.#failedInBatch;
    this.counters.received += received;
    this.onBatch?.(received);
    return n;
  }

  /**
   * Moves every record of the ring (`pending` bytes) into the backlog, when they all fit under its bound (else they
   * wait in the ring).
   */
  #fillBacklog(pending: number): void {
    if (pending === 0 || this.#spill.bytes + pending > this.#spillLimit || !this.spillAllowed()) return;
    this.counters.spilled += this.binding.reader.consume(this.#toSpill, Number.MAX_SAFE_INTEGER);
    if (this.#spill.bytes > this.counters.spillPeakBytes) this.counters.spillPeakBytes = this.#spill.bytes;
  }

  poll(): boolean {
    const reader = this.binding.reader;
    if (reader.pendingBytes) {
      const fraction = reader.pendingBytes() / this.binding.sizeBytes;
      this.#quiet = fraction < IDLE_FILL_FRACTION;
      this.#idlePolls = this.#quiet ? this.#idlePolls + 1 : 0;
      this.#currentIntervalMs = nextPollIntervalMs(this.#currentIntervalMs, this.intervalMs, fraction, this.idleIntervalMs, this.#idlePolls);
    }
    return this.#turn();
  }

  followUp(): boolean {
    return this.#turn();
  }

  #turn(): boolean {
    if (this.#closed) return false;
    const batch = this.#batchRecords;
    const t0 = performance.now();
    let n = 0;
    try {
      n = this.drain();
    } catch (e) {
      this.onError(e as Error);
    }
    const ms = performance.now() - t0;
    const more = n >= batch || this.#spill.size > 0;
    if (more) this.#quiet = false;
    this.counters.turns++;
    if (ms > this.counters.longestTurnMs) this.counters.longestTurnMs = ms;
    this.onTurn?.(ms, n);
    if (n >= MIN_TIMED_RECORDS || (n > 0 && ms >= TURN_BUDGET_MS)) this.#batchRecords = batchRecords((ms * 1e6) / n);
    else if (n >= batch) this.#batchRecords = Math.min(MAX_RECORDS_PER_BATCH, batch * 2);
    return more;
  }

  /**
   * The last reads before the set stops: batches until the ring and the backlog are empty or `budgetMs` has passed
   * (the programs still write meanwhile). What is left then is read without being decoded and returned, for the
   * owner to count as lost: nothing the kernel handed over goes uncounted.
   */
  drainBeforeClose(budgetMs: number): number {
    if (this.#closed) return 0;
    const end = performance.now() + budgetMs;
    try {
      while (performance.now() < end) if (this.drain() === 0) return 0;
    } catch (e) {
      this.onError(e as Error);
    }
    let left = this.#spill.clear();
    try {
      left += this.binding.reader.consume(() => {}, Number.MAX_SAFE_INTEGER);
    } catch {
      // A reader already closed holds nothing more.
    }
    return left;
  }

  /**
   * Stops polling (leaves its ticker) and frees the backlog, as the ring's unread records go with their set.
   * Idempotent; the reader itself is closed by its set.
   */
  close(): void {
    this.#closed = true;
    this.#spill.clear();
    this.#ticker?.remove(this);
    this.#ticker = undefined;
  }
}
