/**
 * The agent's view of itself in debug mode: pprof-format profiles (CPU, heap, goroutine, threadcreate, block,
 * mutex), the execution trace, GC figures, and the runtime watcher that feeds them. The /debug routes
 * (src/server/routes/debug*.ts) serve them.
 */
export { debugRuntimeFor, type DebugRuntime } from "./runtime";
export { createDebugComponent, DEBUG_COMPONENT_ID } from "./component";
