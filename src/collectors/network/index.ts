/**
 * Network tracing: TCP connection lifecycle (metrics and CONNECT spans) and HTTP/1.x spans captured from
 * socket syscalls and from the plaintext of TLS libraries (../tls), from the `network` eBPF program set (ffi/bpf/network.bpf.c). Component `ebpf/network`.
 */
import type { AgentContext } from "../context";
import type { Component } from "../../lifecycle/component";
import { NetworkCollector } from "./component";
import { TlsCollector } from "../tls/component";

export { NetworkCollector } from "./component";
export { networkSetSpec } from "./spec";

/**
 * Its factory (its entry in ../registry.ts): the `ebpf/network` component and `ebpf/tls`, whose plaintext becomes HTTP spans
 * through the network one (each reports `disabled` when turned off).
 */
export function createNetworkCollectors(ctx: AgentContext): Component[] {
  const network = new NetworkCollector(ctx, ctx.ebpf);
  return [network, new TlsCollector(ctx, ctx.ebpf, network)];
}
