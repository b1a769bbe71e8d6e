/** Schema of `agent.ebpf`: the eBPF loader and its program sets. Owned by the eBPF core. */
import { Type, type Static } from "@sinclair/typebox";
import type { ConfigProblem } from "../config/problems";
import { Size, sizeBytes } from "../config/units";

export const EbpfSchema = Type.Object(
  {
    enabled: Type.Boolean({ default: true, description: "Load eBPF programs." }),
    debug: Type.Boolean({ default: false, description: "libbpf log lines at debug level, verifier logs kept. Env: SVC_AGENT_EBPF_DEBUG." }),
    ringbuf_size: Size("16MiB", "Ring buffer size in bytes, rounded up to a power of two."),
    network: Type.Object(
      { enabled: Type.Boolean({ default: true, description: "TCP connection and HTTP tracing." }) },
      { additionalProperties: false, default: {} },
    ),
    syscalls: Type.Object(
      { enabled: Type.Boolean({ default: false, description: "Per-process syscall counts, errors and latency." }) },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false, default: {} },
);
export type EbpfConfig = Static<typeof EbpfSchema>;

const MIN_RINGBUF_BYTES = 4096;
const MAX_RINGBUF_BYTES = 1024 ** 3;

export function validateEbpf(c: EbpfConfig): ConfigProblem[] {
  const b = sizeBytes(c.ringbuf_size);
  if (b < MIN_RINGBUF_BYTES || b > MAX_RINGBUF_BYTES)
    return [{ path: "agent.ebpf.ringbuf_size", message: `must be between 4KiB and 1GiB, got ${b} bytes` }];
  return [];
}
