/** The agent: composition of context and components, reload and shutdown. */
export { Agent, type AgentOptions, type ReloadOutcome } from "./agent";
export { OBSERVER_FACTORIES, buildSubsystems, type ComponentFactory } from "./components";
