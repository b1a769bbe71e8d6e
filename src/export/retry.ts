/**
 * The retry link of the export chain: resends a batch while the outcome is retryable, waiting the server's
 * RetryInfo delay or an exponential backoff with jitter between `backoff.initial` and `backoff.max`. A wait ends
 * early when `wake` aborts (a flush: the batch is tried again at once) or when `stop` aborts (shutdown: the batch
 * gets one last attempt, and is `abandoned` if that one is retryable too).
 */
import { describe, type ExportOutcome } from "./outcome";
import type { ExportRequest, Sender } from "./sender";

/** Backoff is multiplied by a random factor in [1 - JITTER, 1 + JITTER]. */
export const BACKOFF_JITTER = 0.5;
const BACKOFF_MULTIPLIER = 2;

export interface Attempt {
  (): Promise<ExportOutcome>;
}

export type RetryResult = ExportOutcome | { kind: "abandoned"; last: ExportOutcome | undefined };

export interface RetryOptions {
  /** Current backoff range (read at every wait, so a reload applies to batches already retrying). */
  backoff: () => { initialMs: number; maxMs: number };
  /** Aborted on shutdown: a waiting batch is tried once more at once; a retryable outcome after it is final. */
  stop: AbortSignal;
  /** Read at the start of every wait; when the signal it gives aborts, the wait ends and the batch is tried again. */
  wake?: () => AbortSignal;
  /** Called when a retryable outcome sends the batch into a wait of `delayMs`. */
  onWait?: (outcome: ExportOutcome, delayMs: number) => void;
  random?: () => number;
  /** Called before each attempt after the first (a retried attempt). */
  onRetry?: () => void;
}

/** The delay before retry number `attempt` (0-based): initial * 2^attempt, capped at max, with jitter (never above max). */
export function backoffDelayMs(attempt: number, initialMs: number, maxMs: number, random: () => number = Math.random): number {
  const base = Math.min(maxMs, initialMs * BACKOFF_MULTIPLIER ** attempt);
  const jittered = base * (1 - BACKOFF_JITTER + 2 * BACKOFF_JITTER * random());
  return Math.min(maxMs, jittered);
}

/** The longest wait a timer can hold (setTimeout takes a 32-bit signed count of ms and fires at once beyond it). */
export const MAX_WAIT_MS = 2 ** 31 - 1;

/**
 * The wait before the next attempt: the server's delay when it is a usable number (a longer one is cut to
 * MAX_WAIT_MS, about 24.8 days, rather than overflowing the timer into a retry storm), else the backoff
 * (no delay, a negative one such as a RetryInfo of -5 s, NaN).
 */
export function waitMs(serverDelayMs: number | undefined, backoffMs: () => number): number {
  if (serverDelayMs === undefined || !(serverDelayMs >= 0)) return backoffMs();
  return Math.min(serverDelayMs, MAX_WAIT_MS);
}

/** Waits `ms`, or less when one of `signals` aborts. */
function sleep(ms: number, signals: AbortSignal[]): Promise<void> {
  if (signals.some((s) => s.aborted)) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      for (const s of signals) s.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    for (const s of signals) s.addEventListener("abort", done, { once: true });
  });
}

export async function sendWithRetry(attempt: Attempt, o: RetryOptions): Promise<RetryResult> {
  for (let n = 0; ; n++) {
    const last = await attempt();
    if (last.kind !== "retryable") return last;
    if (o.stop.aborted) return { kind: "abandoned", last };
    const { initialMs, maxMs } = o.backoff();
    const delay = waitMs(last.delayMs, () => backoffDelayMs(n, initialMs, maxMs, o.random));
    o.onWait?.(last, delay);
    await sleep(delay, o.wake ? [o.stop, o.wake()] : [o.stop]);
    o.onRetry?.();
  }
}

export interface RetrySenderOptions {
  /** Current backoff range (read at every wait, so a reload applies to batches already retrying). */
  backoff: () => { initialMs: number; maxMs: number };
  random?: () => number;
  /** Called before each attempt after the first (a retried attempt). */
  onRetry?: (request: ExportRequest) => void;
  /** Called when a batch begins a wait (after the state that flush reads was updated). */
  onWait?: () => void;
}

/** A request between its first attempt and its result. */
interface Retrying {
  /** Waiting for its next attempt (backoff). */
  waiting: boolean;
  /** When its latest wait began, as the sender's wait counter read then. */
  waitSeq: number;
  /** `CODE: message` of its latest retryable outcome. */
  lastError: string | undefined;
}

/** The retry link: runs sendWithRetry over the next link and keeps what a flush needs to know of the waits. */
export class RetrySender implements Sender<ExportRequest, Promise<RetryResult>> {
  readonly #next: Sender;
  readonly #o: RetrySenderOptions;
  readonly #stop = new AbortController();
  readonly #retrying = new Set<Retrying>();
  /** Aborted (and replaced) to end every backoff wait at once: a flush. */
  #wake = new AbortController();
  /** Counts backoff waits begun: a flush knows which batches failed after it began. */
  #waits = 0;

  constructor(next: Sender, o: RetrySenderOptions) {
    this.#next = next;
    this.#o = o;
  }

  /** Backoff waits begun so far. */
  get waits(): number {
    return this.#waits;
  }

  async send(request: ExportRequest): Promise<RetryResult> {
    const state: Retrying = { waiting: false, waitSeq: 0, lastError: undefined };
    this.#retrying.add(state);
    try {
      return await sendWithRetry(
        () => {
          state.waiting = false;
          return this.#next.send(request);
        },
        {
          backoff: this.#o.backoff,
          stop: this.#stop.signal,
          wake: () => this.#wake.signal,
          onWait: (outcome) => {
            state.waiting = true;
            state.waitSeq = ++this.#waits;
            if (outcome.kind !== "success") state.lastError = describe(outcome);
            this.#o.onWait?.();
          },
          random: this.#o.random,
          onRetry: this.#o.onRetry && (() => this.#o.onRetry!(request)),
        },
      );
    } finally {
      this.#retrying.delete(state);
    }
  }

  /** Ends every backoff wait now (the batches are tried again at once). */
  wakeAll(): void {
    const w = this.#wake;
    this.#wake = new AbortController();
    w.abort();
  }

  /** Stops retrying for good: a waiting batch is tried once more at once; a retryable outcome after it is final. */
  stop(): void {
    this.#stop.abort();
  }

  /** Whether a batch is retrying and every one failed after wait number `since` and is waiting again. */
  allFailedSince(since: number): boolean {
    let any = false;
    for (const b of this.#retrying) {
      if (!b.waiting || b.waitSeq <= since) return false;
      any = true;
    }
    return any;
  }

  /** The latest error among the batches waiting to be retried. */
  lastError(): string | undefined {
    let best: Retrying | undefined;
    for (const b of this.#retrying) if (b.lastError && (!best || b.waitSeq > best.waitSeq)) best = b;
    return best?.lastError;
  }
}
