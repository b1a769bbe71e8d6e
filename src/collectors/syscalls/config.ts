/** The key `agent.ebpf.syscalls`, owned by the syscall collector, and its switch. */
import { Type, type Static } from "@sinclair/typebox";
import type { ConfigProblem } from "../../config/problems";
import { keysIn } from "../../config/compose";
import type { Config } from "../../config/schema";
import { Duration, msOf } from "../../config/units";

const MIN_INTERVAL_MS = 1000;

export const SyscallsSchema = Type.Object(
  {
    enabled: Type.Boolean({ default: false, description: "Per-process syscall counts, errors and latency." }),
    interval: Duration("15s", "How often the kernel's syscall statistics are read and exported."),
    top_processes: Type.Integer({ minimum: 1, maximum: 1000, default: 20, description: "Processes exported with their own series per interval; the rest are summed as process.executable.name=other, as are processes that ended having made fewer than 1000 calls (the kernel moves their entries into per-syscall totals when they end, so the map stays bounded under process churn)." }),
    max_entries: Type.Integer({ minimum: 1024, maximum: 1_048_576, default: 10_240, description: "Entries (process, syscall) of the kernel statistics map; calls beyond it are counted in <ns>_ebpf_syscalls_dropped_total{reason=\"stats_full\"} (reason inflight_full: the in-flight map of 16384 threads was full)." }),
  },
  { additionalProperties: false, default: {} },
);
export type SyscallsConfig = Static<typeof SyscallsSchema>;

/** Its keys of `agent.ebpf` and rules, and its switch: composed by src/collectors/registry.ts, where it has its entry. */
export const syscallsConfig = {
  config: { syscalls: SyscallsSchema },
  enabled: (c: Config): boolean => c.agent.ebpf.enabled && syscallsOf(c).enabled,
  validate(c: { syscalls: SyscallsConfig }): ConfigProblem[] {
    return msOf(c.syscalls, "interval") < MIN_INTERVAL_MS ? [{ path: "agent.ebpf.syscalls.interval", message: `must be at least 1s, got ${c.syscalls.interval}` }] : [];
  },
};

/** `agent.ebpf.syscalls` of a running configuration. */
export const syscallsOf = (c: Config): SyscallsConfig => keysIn(syscallsConfig, c.agent.ebpf).syscalls;
