/**
 * The memory gate: whether the agent refuses new data now, and why. The limiter sets it; producers read it
 * (`refusing` is a field read, cheap on every submit) or subscribe to its changes (the eBPF core, which sets
 * the flag map the kernel programs read).
 */

/** The drop reason of data refused above the soft limit (`<ns>_<signal>_dropped_total{reason}`). */
export const MEMORY_LIMIT_REASON = "memory_limit";

export class MemoryGate {
  #reason: string | undefined;
  /** Events the kernel programs refused while the gate was closed (HTTP exchanges and other events). */
  refusedInKernel = 0;
  readonly #listeners = new Set<(refusing: boolean) => void>();

  /** True while new data is refused. */
  get refusing(): boolean {
    return this.#reason !== undefined;
  }

  /** Why new data is refused (undefined when it is not). */
  get reason(): string | undefined {
    return this.#reason;
  }

  /** Refuses new data with `reason`, or accepts it again (undefined). Listeners hear changes of `refusing` only. */
  set(reason: string | undefined): void {
    const was = this.refusing;
    this.#reason = reason;
    if (was !== this.refusing) for (const l of [...this.#listeners]) l(this.refusing);
  }

  /** Calls `listener` on every change of `refusing`; returns the function that unsubscribes. */
  subscribe(listener: (refusing: boolean) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}
