/** The syscall collector's switch; its keys are `agent.ebpf.syscalls` (src/ebpf/config.ts). */
import type { EbpfConfig } from "../../ebpf/config";

/** Its keys (none of `agent`), rules and switch, composed by src/collectors/config.ts. */
export const syscallsConfig = {
  config: {},
  validate: (): never[] => [],
  enabled: (c: { ebpf: EbpfConfig }): boolean => c.ebpf.enabled && c.ebpf.syscalls.enabled,
};
