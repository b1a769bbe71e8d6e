/** The agent: composition of context and components, reload and shutdown. */
export { Agent, type AgentOptions, type ReloadOutcome } from "./agent";
export type { AgentContext, BaseContext } from "../lifecycle/context";
export { COLLECTOR_FACTORIES, buildSubsystems, type ComponentFactory } from "./components";
