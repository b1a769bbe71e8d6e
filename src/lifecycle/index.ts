/** Component lifecycle: the Component contract, the Supervisor that starts, stops and reloads, and the reload Mutex. */
export type { Component, ComponentHost, ComponentState, ReadinessCheck } from "./component";
export { Supervisor, ReloadApplyError } from "./supervisor";
export { Mutex } from "./mutex";
