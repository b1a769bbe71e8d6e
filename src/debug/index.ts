/**
 * Debug endpoints' content: pprof-format profiles of the agent itself (CPU, heap, goroutine, threadcreate,
 * block, mutex), the execution trace, runtime variables, and the runtime watcher that feeds them in debug mode.
 */
export { debugVars } from "./vars";
export { PROFILES, profileResponse, type ProfileName } from "./profiles";
export { debugRuntimeFor, type DebugRuntime } from "./runtime";
export { createDebugComponent, DEBUG_COMPONENT_ID } from "./component";
