/**
 * The list of subsystems, in start order: downstream first (exporter), then pipelines and collectors,
 * then discovery. The HTTP server is added last by the Agent itself.
 * A subsystem joins the agent by adding its factory here.
 */
import type { Component } from "../lifecycle/component";
import type { AgentContext } from "./context";

export type ComponentFactory = (ctx: AgentContext) => Component[];

export const COMPONENT_FACTORIES: ComponentFactory[] = [];
