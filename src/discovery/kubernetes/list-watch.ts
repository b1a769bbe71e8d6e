/**
 * The list-then-watch loop for one resource, as client-go's reflector does it: list (resourceVersion of
 * the list), watch from it with bookmarks, keep the last resourceVersion seen (events and BOOKMARKs),
 * reconnect from it when the server ends the watch, list again on 410 Gone, and back off on errors.
 */
import { Backoff, errorText, sleep } from "../backoff";
import { KubeApiError, type KubeApiClient, type KubeObjectMeta } from "./api-client";

/** Server-side watch timeout asked for (the server ends the watch; the loop reconnects from the last version). */
export const WATCH_TIMEOUT_S = 300;
export const INITIAL_BACKOFF_MS = 500;
/** Silence after which a watch connection is given up as dead (the server should have ended it at WATCH_TIMEOUT_S). */
export const WATCH_IDLE_LIMIT_MS = (WATCH_TIMEOUT_S + 60) * 1000;
/** A watch the server ends this soon without any event is treated as a failure to back off from (no tight loop). */
export const QUICK_END_MS = 1_000;

export interface ListWatchHandlers<T> {
  /** Called with the full set after every (re)list. */
  replace(items: T[]): void;
  upsert(item: T): void;
  remove(item: T): void;
  /** Connection state changes: `undefined` when healthy, else the reason of the last failure. */
  state(error: string | undefined): void;
}

/** Counters of one resource's loop (tests and debugging). */
export interface ListWatchStats {
  /** Completed lists (the first one and every re-list). */
  lists: number;
  /** Watches the server accepted. */
  watches: number;
  /** 410 Gone answers (each followed by a re-list). */
  gone: number;
  /** BOOKMARK events received. */
  bookmarks: number;
}

export class ListWatcher<T extends { metadata?: KubeObjectMeta }> {
  resourceVersion = "";
  readonly stats: ListWatchStats = { lists: 0, watches: 0, gone: 0, bookmarks: 0 };
  /** True once the first list completed. */
  synced = false;

  constructor(
    readonly client: KubeApiClient,
    readonly path: string,
    readonly query: Record<string, string>,
    readonly handlers: ListWatchHandlers<T>,
    readonly backoff: Backoff,
    /** Runs each list (a discovery refresh) as a tracked operation, so self-tracing sees it. */
    readonly track: (name: string, fn: () => Promise<void>) => Promise<void> = (_name, fn) => fn(),
  ) {}

  /** Runs until `signal` aborts. Never throws. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        if (!this.resourceVersion) await this.track(`list ${this.path}`, () => this.#list(signal));
        const started = Date.now();
        const received = await this.#watch(signal);
        if (received === 0 && Date.now() - started < QUICK_END_MS) await sleep(this.backoff.nextDelayMs(), signal);
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof KubeApiError && e.status === 410) {
          this.stats.gone++;
          this.resourceVersion = "";
          continue;
        }
        this.handlers.state(errorText(e));
        await sleep(this.backoff.nextDelayMs(), signal);
      }
    }
  }

  async #list(signal: AbortSignal): Promise<void> {
    const { items, resourceVersion } = await this.client.list<T>(this.path, this.query, signal);
    this.stats.lists++;
    this.resourceVersion = resourceVersion;
    this.handlers.replace(items);
    this.synced = true;
    this.backoff.reset();
    this.handlers.state(undefined);
  }

  /** Watches until the server ends the stream; returns how many events arrived. */
  async #watch(signal: AbortSignal): Promise<number> {
    const events = await this.client.watch<T>(
      this.path,
      { ...this.query, resourceVersion: this.resourceVersion, allowWatchBookmarks: "true", timeoutSeconds: String(WATCH_TIMEOUT_S) },
      signal,
      WATCH_IDLE_LIMIT_MS,
    );
    this.stats.watches++;
    this.backoff.reset();
    this.handlers.state(undefined);
    let received = 0;
    for await (const ev of events) {
      if (signal.aborted) return received;
      received++;
      if (ev.type === "ERROR") {
        const code = ev.object.code ?? 0;
        throw new KubeApiError(code, this.path, ev.object.message ?? ev.object.reason ?? "watch error");
      }
      const rv = ev.object.metadata?.resourceVersion;
      if (ev.type === "BOOKMARK") this.stats.bookmarks++;
      else if (ev.type === "DELETED") this.handlers.remove(ev.object);
      else this.handlers.upsert(ev.object);
      if (rv) this.resourceVersion = rv;
    }
    return received;
  }
}
