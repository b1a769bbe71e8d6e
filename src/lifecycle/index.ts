/** Component lifecycle: the Component contract, the BaseContext every factory is given, the Supervisor that starts, stops and reloads, and the reload Mutex. */
export type { Component, ComponentHost, ComponentState, ReadinessCheck } from "./component";
export { Supervisor, ReloadApplyError } from "./supervisor";
export { Mutex } from "./mutex";
export type { BaseContext } from "./context";
