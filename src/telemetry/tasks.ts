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

export class TaskRegistry {
  readonly #live = new Map<number, TaskInfo>();
  #nextId = 1;
  /** Capture creation stacks (costly; on in debug mode only). */
  captureStacks = false;

  /** Registers a unit of work; call the returned function exactly once when it ends (later calls are no-ops). */
  begin(name: string, kind: TaskInfo["kind"] = "task"): () => void {
    const id = this.#nextId++;
    const stack = this.captureStacks ? new Error().stack?.split("\n").slice(2).join("\n") : undefined;
    this.#live.set(id, { id, name, kind, startedAt: Date.now(), stack });
    return () => {
      this.#live.delete(id);
    };
  }

  /** Runs `fn` as a tracked operation. */
  async track<T>(name: string, fn: () => Promise<T>, kind: TaskInfo["kind"] = "operation"): Promise<T> {
    const end = this.begin(name, kind);
    try {
      return await fn();
    } finally {
      end();
    }
  }

  /** Number of live units (the main event loop counts as one). */
  count(): number {
    return this.#live.size + 1;
  }

  list(): TaskInfo[] {
    return [...this.#live.values()];
  }
}
