/**
 * The contract every subsystem keeps: start, shutdown, optional reload, and status reported as events.
 * Modelled on the OpenTelemetry Collector: components report status *changes* to their host;
 * one aggregator (src/status) listens and answers health, readiness and the status views.
 */
import type { Config } from "../config/schema";
import type { ComponentHost } from "./host";
import type { ReadinessCheck } from "../status/state";

export type { ComponentState, ReadinessCheck } from "../status/state";
export type { ComponentHost } from "./host";


export interface Component {
  /** `kind/name`, e.g. `exporter/otlp`, `ebpf/network`, `discovery/docker`. Unique in the agent. */
  readonly id: string;
  /** Which readiness check this component's state feeds, if any. */
  readonly readiness?: ReadinessCheck;
  /**
   * Started before every other component, whatever the order added (the HTTP interface: /healthz answers and
   * /ready names what is still starting while the eBPF program sets load). Shutdown keeps the order added.
   */
  readonly startsEarly?: boolean;
  /**
   * Starts the component; long work goes to the background. Reports `ok`, `disabled` or an error through the host.
   * Throwing means the component could not start at all; the supervisor reports it as `permanent_error`.
   */
  start(host: ComponentHost): Promise<void>;
  /** Stops the component, releasing everything it holds. Safe to call twice and without start. */
  shutdown(deadline: AbortSignal): Promise<void>;
  /**
   * Applies a new configuration atomically: either all of it takes effect or nothing changes and it throws.
   * Called with the reload lock held, so never concurrently with another reload. Absent: the component needs nothing.
   */
  reload?(next: Config, previous: Config): Promise<void>;
}
