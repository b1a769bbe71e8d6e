/** The agent: composition of context and components, reload and shutdown. */
export { Agent, type AgentOptions, type ReloadOutcome } from "./agent";
export { COLLECTOR_FACTORIES, buildSubsystems, type ComponentFactory } from "./components";
