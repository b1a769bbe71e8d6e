/**
 * The third link: resends a batch while the outcome is retryable, waiting the server's RetryInfo delay or an
 * exponential backoff with jitter between `backoff.initial` and `backoff.max`. Gives up when `stop` aborts
 * (shutdown): the batch is then `abandoned`.
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
  /** Aborted on shutdown: no further attempts. */
  stop: AbortSignal;
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

function sleep(ms: number, stop: AbortSignal): Promise<boolean> {
  if (stop.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      stop.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    stop.addEventListener("abort", onAbort, { once: true });
  });
}

export async function sendWithRetry(attempt: Attempt, o: RetryOptions): Promise<RetryResult> {
  let last: ExportOutcome | undefined;
  for (let n = 0; ; n++) {
    if (o.stop.aborted && last) return { kind: "abandoned", last };
    last = await attempt();
    if (last.kind !== "retryable") return last;
    if (o.stop.aborted) return { kind: "abandoned", last };
    const { initialMs, maxMs } = o.backoff();
    const delay = last.delayMs ?? backoffDelayMs(n, initialMs, maxMs, o.random);
    if (!(await sleep(delay, o.stop))) return { kind: "abandoned", last };
    o.onRetry?.();
  }
}
