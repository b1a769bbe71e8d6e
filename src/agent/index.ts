/** The agent: composition of context and components, reload and shutdown. */
export { Agent, type AgentOptions, type ReloadOutcome } from "./agent";
export type { AgentContext } from "./context";
export { COMPONENT_FACTORIES, type ComponentFactory } from "./components";
export { redactConfig, secretsOf, REDACTED } from "./secrets";
