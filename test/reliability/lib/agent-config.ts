/** Configuration text for the reliability suite's agents: QUIET_CONFIG's shape with the sections a test needs. */
import { readdirSync, readFileSync } from "node:fs";

export interface SuiteConfigOptions {
  /** Extra lines under self_telemetry (indented by two spaces already). */
  selfTelemetry?: string;
  /** Extra top-level sections. */
  extra?: string;
  /** Lines under agent.ebpf (default: enabled: false). */
  ebpf?: string;
  /** OTLP endpoint (default: ${OTLP_ENDPOINT:-127.0.0.1:4317}). */
  endpoint?: string;
}

export function suiteConfig(o: SuiteConfigOptions = {}): string {
  return `
self_telemetry:
  listen: 127.0.0.1:0
${o.selfTelemetry ?? ""}
otlp:
  endpoint: ${o.endpoint ?? "${OTLP_ENDPOINT:-127.0.0.1:4317}"}
${o.extra ?? ""}
agent:
  ebpf:
${o.ebpf ?? "    enabled: false"}
  discovery:
    detect_kubernetes: false
    docker:
      enabled: false
    cloud:
      enabled: false
`;
}

/** RSS in KiB of a process, from /proc (0 when it is gone). */
export function rssKiB(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/** Open file descriptors of a process. */
export function fdCount(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return 0;
  }
}
