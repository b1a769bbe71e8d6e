/**
 * The one place that listens to component status events and answers health, readiness and status views.
 * Routes ask the aggregator, never a component.
 */
import type { StatusSection } from "./model";
import type { ComponentState, ReadinessCheck } from "./state";

export const READINESS_CHECKS: readonly ReadinessCheck[] = ["ebpf", "otlp", "discovery", "memory"];

export interface ComponentStatus {
  id: string;
  readiness: ReadinessCheck | undefined;
  state: ComponentState;
  reason: string | undefined;
  /** When the state last changed (ISO 8601 UTC). */
  since: string;
}

export interface Health {
  healthy: boolean;
  reasons: string[];
}

export interface Readiness {
  ready: boolean;
  checks: Record<ReadinessCheck, string>;
}

/** Named status views (`ebpf`, `export`, `discovery`, `profiling`...) published by components as snapshot functions. */
export type ViewProvider = () => unknown;

type Listener = (s: ComponentStatus) => void;

export class StatusAggregator {
  readonly #components = new Map<string, ComponentStatus>();
  readonly #views = new Map<string, ViewProvider>();
  readonly #summaries = new Map<string, ViewProvider>();
  readonly #listeners = new Set<Listener>();
  readonly startedAt = new Date();
  /** Health and readiness, recomputed on the first question after a change (probes are hot paths). */
  #health: Health | undefined;
  #readiness: Readiness | undefined;

  /** Records a state change of component `id`. Repeating the same state and reason is a no-op. */
  report(id: string, readiness: ReadinessCheck | undefined, state: ComponentState, reason?: string): void {
    const prev = this.#components.get(id);
    if (prev && prev.state === state && prev.reason === reason) return;
    const status: ComponentStatus = { id, readiness, state, reason, since: new Date().toISOString() };
    this.#components.set(id, status);
    this.#health = this.#readiness = undefined;
    for (const l of this.#listeners) l(status);
  }

  /** Forgets a component (after it was removed by a reload). */
  remove(id: string): void {
    this.#components.delete(id);
    this.#health = this.#readiness = undefined;
  }

  /** Calls `fn` on every status change; returns a function that stops it. */
  subscribe(fn: Listener): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  components(): ComponentStatus[] {
    return [...this.#components.values()];
  }

  component(id: string): ComponentStatus | undefined {
    return this.#components.get(id);
  }

  /** Unhealthy only when some component is in a fatal state. */
  health(): Health {
    return (this.#health ??= this.#computeHealth());
  }

  #computeHealth(): Health {
    const reasons = this.components()
      .filter((c) => c.state === "fatal_error")
      .map((c) => `${c.id}: ${c.reason ?? "fatal error"}`);
    return { healthy: reasons.length === 0, reasons };
  }

  /** Each check is `ok` when every component feeding it is ok or disabled, else `failed: <reason>` of the first that is not. */
  readiness(): Readiness {
    return (this.#readiness ??= this.#computeReadiness());
  }

  #computeReadiness(): Readiness {
    const checks = {} as Record<ReadinessCheck, string>;
    for (const check of READINESS_CHECKS) {
      const failing = this.components().find((c) => c.readiness === check && c.state !== "ok" && c.state !== "disabled");
      checks[check] = failing ? `failed: ${failingReason(failing)}` : "ok";
    }
    return { ready: Object.values(checks).every((v) => v === "ok"), checks };
  }

  /**
   * Publishes (or replaces) a named view; the provider must be cheap and synchronous. `summary`, when given,
   * answers the few figures /status shows of the view without building it (same values at the same instant);
   * replacing a view without one withdraws the previous summary. Either returns a new object at each call, or one
   * never changed afterwards (GET /status compares a summary with the previous one, and the same object is equal).
   */
  provide(view: string, provider: ViewProvider, summary?: ViewProvider): void {
    this.#views.set(view, provider);
    if (summary) this.#summaries.set(view, summary);
    else this.#summaries.delete(view);
  }

  /** Removes a named view (its component stopped). */
  withdraw(view: string, provider?: ViewProvider): void {
    if (provider === undefined || this.#views.get(view) === provider) {
      this.#views.delete(view);
      this.#summaries.delete(view);
    }
  }

  /** The current snapshot of a view, or undefined when no component publishes it. */
  view<T>(view: string): T | undefined {
    const p = this.#views.get(view);
    return p ? (p() as T) : undefined;
  }

  /** The current summary of a view, or undefined when its publisher gave none (then summarise `view`). */
  summary<T>(view: string): T | undefined {
    const p = this.#summaries.get(view);
    return p ? (p() as T) : undefined;
  }

  /** The section's published view, else its disabled view for `config`. */
  viewOf<V, S, C>(section: StatusSection<V, S, C>, config: C): V {
    return this.view<V>(section.name) ?? section.disabled(config);
  }

  /** The section's published summary, else the summary of viewOf(section). */
  summaryOf<V, S, C>(section: StatusSection<V, S, C>, config: C): S {
    return this.summary<S>(section.name) ?? section.summary(this.viewOf(section, config));
  }
}

function failingReason(c: ComponentStatus): string {
  if (c.reason) return c.reason;
  switch (c.state) {
    case "starting":
      return `${c.id} is starting`;
    case "stopping":
    case "stopped":
      return `${c.id} is stopped`;
    default:
      return `${c.id}: ${c.state.replace("_", " ")}`;
  }
}
