/** What a component is given at start, apart from the contract (component.ts), so that code below the configuration can name it. */
import type { Logger } from "../log/logger";
import type { ComponentState } from "../status/state";

/** What a component is given at start: a logger, a way to report status, and a way to publish status views. */
/** What a component is given at start: a logger, a way to report status, and a way to publish status views. */
export interface ComponentHost {
  /** A logger whose records carry `component: <id>`. */
  readonly logger: Logger;
  /** Reports a status change; `reason` is required for error states and shown in /ready and /healthz. Cheap; call on every change. */
  report(state: ComponentState, reason?: string): void;
}
