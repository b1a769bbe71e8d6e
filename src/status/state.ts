/** The states a component reports (src/lifecycle) and the status aggregator counts. */

/**
 * - `starting`: start() is running or the first useful state is not reached yet (not ready).
 * - `ok`: working.
 * - `recoverable_error`: not working now, retrying by itself (e.g. backend refused): not ready, still healthy.
 * - `permanent_error`: will not work without a configuration change (e.g. required eBPF program failed): not ready.
 * - `fatal_error`: the agent cannot go on: unhealthy.
 * - `disabled`: turned off by configuration: counts as ok.
 * - `stopping` / `stopped`: around shutdown.
 */
export type ComponentState =
  | "starting"
  | "ok"
  | "recoverable_error"
  | "permanent_error"
  | "fatal_error"
  | "disabled"
  | "stopping"
  | "stopped";

/** The readiness check a component counts towards (`/ready`'s `checks`); components outside these only affect health. */
export type ReadinessCheck = "ebpf" | "otlp" | "discovery" | "memory";
