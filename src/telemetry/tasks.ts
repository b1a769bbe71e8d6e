/**
 * The agent's concurrent execution units: long-running tasks (readers, watchers, batchers, timers) and
 * in-flight operations (exports, HTTP requests). `count()` is the `<ns>_go_goroutines` gauge; the list
 * with creation stacks feeds the goroutine debug profile.
 */
export interface TaskInfo {
  id: number;
  /** What the task is, e.g. `exporter/otlp batcher traces` or `http GET /status`. */
  name: string;
  kind: "task" | "operation";
  startedAt: number;
  /** Where the task was started (captured only when stack capture is on, i.e. in debug mode). */
  stack: string | undefined;
}

/** How a unit ended: the error when it failed, and facts about it (e.g. an HTTP status). */
export interface TaskOutcome {
  error?: unknown;
  attributes?: Record<string, string | number | boolean>;
}

/** What an observer keeps for one unit: called once when it ends; `run` scopes the unit's own work (async context). */
export interface TaskWatch {
  end(outcome: TaskOutcome): void;
  run?<T>(fn: () => T): T;
}

/**
 * Watches units begin and end (debug profiles, the execution trace, self-tracing). Must not throw.
 * `scoped` is true for `track` (the unit's work runs inside `run`), false for `begin` (the rest of the caller's
 * async flow is the unit's work).
 */
export interface TaskObserver {
  began(info: TaskInfo, scoped: boolean): TaskWatch | undefined;
}

const unwatched = <T>(fn: () => T): T => fn();

export class TaskRegistry {
  readonly #live = new Map<number, TaskInfo>();
  #nextId = 1;
  /** Capture creation stacks (costly; on in debug mode only). */
  captureStacks = false;
  /** Observers told of every unit's begin and end (added by src/debug and src/tracing). */
  readonly observers = new Set<TaskObserver>();

  /** Registers a unit of work; call the returned function exactly once when it ends (later calls are no-ops). */
  begin(name: string, kind: TaskInfo["kind"] = "task"): (outcome?: TaskOutcome) => void {
    // Nobody watching (every HTTP request while debug mode and self-tracing are off): the live entry is all there is.
    if (this.observers.size === 0 && !this.captureStacks) {
      const id = this.#register(name, kind, undefined).id;
      return () => void this.#live.delete(id);
    }
    return this.#start(name, kind, false).end;
  }

  /** Runs `fn` as a tracked operation (inside the observers' scope, so operations it starts are its children). */
  async track<T>(name: string, fn: () => Promise<T>, kind: TaskInfo["kind"] = "operation"): Promise<T> {
    const { end, run } = this.#start(name, kind, true);
    try {
      const result = await run(fn);
      end();
      return result;
    } catch (error) {
      end({ error });
      throw error;
    }
  }

  /** Adds the live entry of a unit beginning now. */
  #register(name: string, kind: TaskInfo["kind"], stack: string | undefined): TaskInfo {
    const info: TaskInfo = { id: this.#nextId++, name, kind, startedAt: Date.now(), stack };
    this.#live.set(info.id, info);
    return info;
  }

  #start(name: string, kind: TaskInfo["kind"], scoped: boolean) {
    const stack = this.captureStacks ? new Error().stack?.split("\n").slice(3).join("\n") : undefined;
    const info = this.#register(name, kind, stack);
    const id = info.id;
    let watches: TaskWatch[] | undefined;
    for (const o of this.observers) {
      const w = o.began(info, scoped);
      if (w) (watches ??= []).push(w);
    }
    // No observer took it (e.g. a long-running task, which the tracer leaves alone): the live entry is all there is.
    if (watches === undefined) return { end: () => void this.#live.delete(id), run: unwatched };
    let ended = false;
    const end = (outcome: TaskOutcome = {}) => {
      if (ended) return;
      ended = true;
      this.#live.delete(id);
      for (const w of watches) w.end(outcome);
    };
    const run = <T>(fn: () => T): T => watches.reduce<() => T>((inner, w) => (w.run ? () => w.run!(inner) : inner), fn)();
    return { end, run };
  }

  /** Number of live units (the main event loop counts as one). */
  count(): number {
    return this.#live.size + 1;
  }

  list(): TaskInfo[] {
    return [...this.#live.values()];
  }
}
