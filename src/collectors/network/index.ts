/**
 * Network tracing: TCP connection lifecycle (metrics and CONNECT spans) and HTTP/1.x spans captured from
 * socket syscalls, from the `network` eBPF program set (ffi/bpf/network.bpf.c). Component `ebpf/network`.
 */
import type { AgentContext } from "../context";
import type { Component } from "../../lifecycle/component";
import { NetworkCollector } from "./component";

export { NetworkCollector } from "./component";
export { networkSetSpec } from "./spec";

/** COLLECTOR_FACTORIES entry: the `ebpf/network` component (it reports `disabled` when turned off). */
export function createNetworkCollectors(ctx: AgentContext): Component[] {
  return [new NetworkCollector(ctx, ctx.ebpf)];
}
