/**
 * Schema of `agent.ebpf`: the eBPF loader's keys, owned by the eBPF core, and its program sets' keys, each owned by
 * its collector's folder (`network`, `syscalls`: src/collectors/<name>/config.ts, composed by src/collectors/registry.ts).
 */
import { Type, type TProperties } from "@sinclair/typebox";
import type { ConfigProblem } from "../config/problems";
import { Size, bytesOf } from "../config/units";

/** The loader's keys. */
const EbpfCoreKeys = {
  enabled: Type.Boolean({ default: true, description: "Load eBPF programs." }),
  debug: Type.Boolean({ default: false, description: "libbpf log lines at debug level, verifier logs kept. Env: SVC_AGENT_EBPF_DEBUG." }),
  ringbuf_size: Type.Union([Type.Literal("auto"), Size(0, "")], {
    default: "auto",
    description:
      "Size of every ring buffer in bytes, rounded up to a power of two; auto sizes each ring to the event rate the configuration allows (network http_events: one second of max_spans_per_second exchanges or a tenth of a second of http2_records_per_second records, whichever is larger, 256KiB to 8MiB, as the set loads: a reload of those two limits alone keeps it; the others 1MiB). A ring found more than half full (the agent fell behind its events) is moved into the agent's memory and decoded from there, up to 8 ring sizes (64MiB) and not while agent.memory_limit refuses; events that do not fit are counted as lost. A set that stops (shutdown, reload) first decodes what its ring and that memory still hold, for up to 100 ms in all; what is left then is counted as lost. A reload that changes it loads each running set again with its new rings while the old one still runs, and switches once that one has stopped.",
  }),
};

/** `agent.ebpf`: the loader's keys, then the program sets' `sets`. */
export function ebpfSchema<S extends TProperties>(sets: S) {
  return Type.Object({ ...EbpfCoreKeys, ...sets }, { additionalProperties: false, default: {} });
}

const MIN_RINGBUF_BYTES = 4096;
const MAX_RINGBUF_BYTES = 1024 ** 3;

/** Rules of the loader's keys (the sets' rules are their folders'). */
export function validateEbpf(c: { ringbuf_size: string | number }): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const b = c.ringbuf_size === "auto" ? MIN_RINGBUF_BYTES : bytesOf(c, "ringbuf_size");
  if (b < MIN_RINGBUF_BYTES || b > MAX_RINGBUF_BYTES)
    problems.push({ path: "agent.ebpf.ringbuf_size", message: `must be between 4KiB and 1GiB, got ${b} bytes` });
  return problems;
}
