/**
 * The third link: resends a batch while the outcome is retryable, waiting the server's RetryInfo delay or an
 * exponential backoff with jitter between `backoff.initial` and `backoff.max`. A wait ends early when `wake`
 * aborts (a flush: the batch is tried again at once) or when `stop` aborts (shutdown: the batch gets one last
 * attempt, and is `abandoned` if that one is retryable too).
 */
import type { ExportOutcome } from "./outcome";

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
