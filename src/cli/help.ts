/** Help texts, kept next to the commands they describe. */

export const MAIN_HELP = `svc-agent: eBPF telemetry collection agent (spans, metrics, logs, profiles over OTLP/gRPC or OTLP/HTTP)

Usage:
  svc-agent [run] [--config PATH] [--debug]   run the agent
  svc-agent --validate-config PATH            check a configuration file and exit
  svc-agent receive --listen ADDR [--output FILE]
                                              run a small OTLP/gRPC receiver that prints what arrives
  svc-agent diagnostics [--config PATH] [--output FILE]
                                              write a diagnostics bundle (tar.gz)
  svc-agent version | --version               print version, commit, build time, Bun version
  svc-agent help [COMMAND]                    this text, or a command's
  svc-agent help config                       every configuration key (type, default, meaning) and
                                              the OTEL_* environment variables

Configuration: --config, else $SVC_CONFIG, else /etc/svc-agent/config.yaml if it exists, else the
embedded defaults. Environment overrides: SVC_LOG_LEVEL, SVC_LOG_FORMAT, SVC_AGENT_EBPF_DEBUG, SVC_DEBUG,
and the OpenTelemetry variables OTEL_EXPORTER_OTLP_* (endpoint, protocol, headers, compression, timeout,
per signal too), OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES; they win over the file (help config).

Exit codes: 0 ok, 1 runtime failure, 2 configuration or usage error.
`;

export const RUN_HELP = `Usage: svc-agent [run] [--config PATH] [--debug]

Runs the agent: loads eBPF programs, collects, discovers, exports over OTLP (otlp.protocol: grpc or
http/protobuf), and serves the self-telemetry HTTP interface on self_telemetry.listen (default :19090).

Options:
  --config PATH   configuration file (default: $SVC_CONFIG, /etc/svc-agent/config.yaml, embedded defaults)
  --debug         debug mode: serve /debug/* (same as self_telemetry.debug.enabled or SVC_DEBUG=true)

Signals: SIGTERM/SIGINT drain queues within shutdown_timeout and exit 0 (a second one exits at once);
SIGHUP reloads the configuration file (same as POST /admin/reload).
The first log record with msg "listening" carries the bound address of the HTTP interface.

Exit codes: 0 stopped cleanly, 1 runtime failure (e.g. the listen address is taken), 2 configuration error.
`;

export const VALIDATE_HELP = `Usage: svc-agent --validate-config PATH

Checks a configuration file without starting anything: YAML syntax, unknown keys, types, durations
(500ms, 1s, 2m), sizes (64MiB, 16777216), ranges, \${VAR} references, and cross-field rules.

Exit codes: 0 valid (one summary line on stdout), 2 invalid (every problem on stderr with its key path and
its line and column in the file; a value under a secret key is never shown).
`;

export const VERSION_HELP = `Usage: svc-agent version | svc-agent --version

Prints the version, the build commit, the build timestamp and the Bun version.
`;
