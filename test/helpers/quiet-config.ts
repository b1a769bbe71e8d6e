/**
 * The quiet configuration every test and benchmark agent starts from: the HTTP interface on loopback port 0,
 * export to ${OTLP_ENDPOINT}, and nothing that needs privileges or peers (eBPF, Kubernetes, Docker, cloud
 * metadata). Options add the sections a test needs; `quietConfig()` alone is QUIET_CONFIG.
 */
export interface QuietConfigOptions {
  /** Extra lines under self_telemetry (indented by two spaces already). */
  selfTelemetry?: string;
  /** OTLP endpoint (default: ${OTLP_ENDPOINT:-127.0.0.1:4317}). */
  endpoint?: string;
  /** Extra lines under otlp (indented by two spaces already). */
  otlp?: string;
  /** Extra top-level sections. */
  extra?: string;
  /** Lines under agent.ebpf (default: enabled: false). */
  ebpf?: string;
  /** Lines under agent.discovery.docker (default: enabled: false). */
  docker?: string;
  /** Extra sections under agent (logs, profiling ...; indented by two spaces already). */
  agent?: string;
}

const lines = (text: string | undefined) => (text ? `${text.replace(/\n$/, "")}\n` : "");

export function quietConfig(o: QuietConfigOptions = {}): string {
  return `
self_telemetry:
  listen: 127.0.0.1:0
${lines(o.selfTelemetry)}otlp:
  endpoint: ${o.endpoint ?? "${OTLP_ENDPOINT:-127.0.0.1:4317}"}
${lines(o.otlp)}${lines(o.extra)}agent:
  ebpf:
${lines(o.ebpf ?? "    enabled: false")}  discovery:
    detect_kubernetes: false
    docker:
${lines(o.docker ?? "      enabled: false")}    cloud:
      enabled: false
${lines(o.agent)}`;
}

/** quietConfig() with no option: tests extend it with `.replace` or by appending top-level sections. */
export const QUIET_CONFIG = quietConfig();
