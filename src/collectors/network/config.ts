/** The network collector's switch; its keys are `agent.ebpf.network` (src/ebpf/config.ts). */
import type { EbpfConfig } from "../../ebpf/config";

/** Its keys (none of `agent`), rules and switch (`ebpf/tls` needs `ebpf/network`), composed by src/collectors/config.ts. */
export const networkConfig = {
  config: {},
  validate: (): never[] => [],
  enabled: (c: { ebpf: EbpfConfig }): boolean => c.ebpf.enabled && c.ebpf.network.enabled,
};
