/** The key `agent.ebpf.network`, owned by the network collector (and its TLS part), and its switch. */
import { Type, type Static } from "@sinclair/typebox";
import type { ConfigProblem } from "../../config/problems";
import { keysIn } from "../../config/compose";
import type { Config } from "../../config/schema";
import { Duration, msOf } from "../../config/units";

const MIN_METRICS_INTERVAL_MS = 1000;

export const NetworkSchema = Type.Object(
  {
    enabled: Type.Boolean({ default: true, description: "TCP connection and HTTP tracing." }),
    http: Type.Boolean({ default: true, description: "HTTP/1.x spans from the first bytes of socket reads and writes; HTTP/2 (h2c) and gRPC spans from every byte of connections that open with the HTTP/2 preface or SETTINGS, and of connections older than the agent from their first calls that start with HTTP/2 frames (needs network.enabled)." }),
    http_capture: Type.Union([Type.Literal("socket"), Type.Literal("syscalls")], {
      default: "socket",
      description:
        "How HTTP bytes are found: socket = at sock_send/recv_length from the syscall's saved registers (kernel 5.15+, x86_64; no work for non-socket I/O); syscalls = read/write/recvfrom/sendto/readv/writev/recvmsg/sendmsg enter/exit tracepoints (any kernel, more overhead; a call whose buffer the in-flight map of 16384 threads has no room for is not captured, counted in <ns>_ebpf_network_dropped_total{reason=\"pending_full\"}).",
    }),
    http_query_redaction: Type.Union([Type.Literal("all"), Type.Literal("sensitive"), Type.Literal("none")], {
      default: "all",
      description:
        "Query values in url.query and url.full of HTTP spans replaced by REDACTED: all (every value), sensitive (those of AWSAccessKeyId, Signature, sig and X-Goog-Signature, the OpenTelemetry conventions' list) or none. User info in a URL is always redacted.",
    }),
    http_routes: Type.Array(Type.String({ pattern: "^/", minLength: 1 }), {
      default: [],
      description:
        "Route templates of HTTP servers (\"/users/{id}/orders\": {name} is one path segment), for every service: a path matching one (first wins) has it as http.route, in RED metrics and on its server span (named \"METHOD template\"). Paths no template matches take the heuristic route of http_max_routes.",
    }),
    http_routes_by_service: Type.Record(Type.String({ minLength: 1 }), Type.Array(Type.String({ pattern: "^/", minLength: 1 })), {
      default: {},
      description:
        "Route templates per service.name, tried before http_routes for that service's RED metrics and server spans (\"checkout: [/carts/{id}]\").",
    }),
    http_metrics: Type.Boolean({
      default: true,
      description:
        "RED metrics of every HTTP exchange (http.server.request.duration, http.client.request.duration, the service graph), whatever max_spans_per_second samples. With http_capture socket and kernel BTF, HTTP/1.x exchanges are counted in the kernel (no exchange leaves it but the sampled ones); otherwise the kernel captures every exchange and user space decodes and counts each (more CPU: every exchange crosses the ring buffer and the parser; requests never answered are not counted as connection_closed). The kernel follows one HTTP/1.x request a connection: one replaced by a pipelined request before its response is not counted, but counted in <ns>_ebpf_network_dropped_total{reason=\"red_replaced\"}. HTTP/2 exchanges are counted in user space as their streams end (gRPC calls: rpc.server.duration / rpc.client.duration instead).",
    }),
    http_duration_buckets: Type.Array(Type.Number({ exclusiveMinimum: 0 }), {
      default: [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10],
      minItems: 1,
      maxItems: 16,
      description: "Bucket bounds (seconds, increasing) of the HTTP duration histograms; the HTTP semantic conventions' defaults.",
    }),
    http_body_sizes: Type.Boolean({
      default: false,
      description:
        "Body size histograms of every HTTP/1.x exchange counted in the kernel (http_metrics with http_capture socket and kernel BTF; not TLS, HTTP/2 or user-space counting): http.server.request.body.size, http.server.response.body.size, http.client.request.body.size and http.client.response.body.size (bytes, unit By, the duration histograms' attributes). A size is the bytes transferred after the message's head: its Content-Length for a delimited body, the chunked encoding's bytes (chunk sizes and terminators included) for a chunked one, everything up to the close for a close-delimited one; a request's body counts the bytes moved before the response began, a response's the bytes moved while the metrics' one-second generation lasts. A message whose head does not end within the first 512 bytes of its first read or write is left out. Costs a search of each message's head in the kernel.",
    }),
    http_body_size_buckets: Type.Array(Type.Number({ minimum: 0 }), {
      default: [0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000],
      minItems: 1,
      maxItems: 16,
      description: "Bucket bounds (bytes, increasing) of the HTTP body size histograms (http_body_sizes); the OpenTelemetry SDK's default explicit bounds.",
    }),
    http_max_routes: Type.Integer({
      minimum: 1,
      maximum: 10_000,
      default: 100,
      description: "http.route values per service at most in RED metrics (templates, else numeric, UUID, hex and token segments as placeholders); paths of further routes count under the route {overflow}. A server span carries its series' route and is named \"METHOD route\"; a span whose path counts under {overflow} has no http.route and is named \"METHOD\". With http_metrics off, spans take routes themselves, as many per service at most.",
    }),
    tls: Type.Boolean({
      default: true,
      description:
        "HTTP spans from the plaintext of TLS connections: uprobes on SSL_read/SSL_write(_ex) of the libssl (OpenSSL 1.1/3, BoringSSL) processes load, or of executables with OpenSSL linked in with its symbols (needs network.enabled and network.http; off: nothing is loaded).",
    }),
    max_tls_libraries: Type.Integer({ minimum: 1, maximum: 1024, default: 64, description: "TLS library files (and static executables) probed at once, counting those kept 60 s after their last process exited (they make room first); more are listed in /status/ebpf as not attached." }),
    max_spans_per_second: Type.Integer({ minimum: 1, maximum: 1_000_000, default: 250, description: "Cap on spans created per second (CONNECT and HTTP); HTTP exchanges over it, or arriving while the kernel's HTTP ring buffer is half full, are not captured in the kernel (RED metrics still count them; where RED is counted in user space, see http_metrics, the kernel captures every exchange and the cap applies to spans in user space). Drops are counted. A reload that changes it (or http2_records_per_second) sets the new limit in the running kernel programs: nothing in flight is missed, and the http_events ring keeps the size it was created with (ringbuf_size auto)." }),
    http2_records_per_second: Type.Integer({
      minimum: 1,
      maximum: 10_000_000,
      default: 50_000,
      description:
        "Reads and writes of HTTP/2 connections forwarded to user space per second, all socket connections together, and as many SSL_read/SSL_write calls of HTTP/2 over TLS in a window of their own (HTTP/2 needs every call of a connection to decode its headers, whatever max_spans_per_second samples). A connection with a call over it, or with a call arriving while its ring buffer (HTTP, or TLS) is three quarters full, is stopped: counted per connection direction in svc_spans_dropped_total{reason=\"rate_limit\"} (directions whose records were lost in a full ring or cut: reason http2_state_lost). A stopped connection is forwarded again at its first call that starts with frames once the ring is under a quarter full and this budget has room, and decoded anew from there with partial HPACK tables (svc_ebpf_http2_resumed_total). Changed by a reload in the running kernel programs (see max_spans_per_second).",
    }),
    max_connections: Type.Integer({ minimum: 1024, maximum: 4_194_304, default: 65_536, description: "TCP connections tracked in the kernel at once (per-socket storage entries, or entries of the conns hash on kernels without BTF); connections beyond it are not traced, their calls counted in <ns>_ebpf_network_dropped_total{reason=\"conns_full\"}." }),
    max_series: Type.Integer({ minimum: 1, maximum: 100_000, default: 2000, description: "Label sets per export interval of the connection metrics; more go to one overflow series." }),
    metrics_interval: Duration("15s", "How often connection metrics are exported."),
  },
  { additionalProperties: false, default: {} },
);
export type NetworkConfig = Static<typeof NetworkSchema>;

/**
 * Its keys of `agent.ebpf` and rules, and its switch (`ebpf/tls` needs `ebpf/network`): composed by
 * src/collectors/registry.ts, where it has its entry.
 */
export const networkConfig = {
  config: { network: NetworkSchema },
  enabled: (c: Config): boolean => c.agent.ebpf.enabled && networkOf(c).enabled,
  validate(c: { network: NetworkConfig }): ConfigProblem[] {
    const problems: ConfigProblem[] = [];
    if (msOf(c.network, "metrics_interval") < MIN_METRICS_INTERVAL_MS)
      problems.push({ path: "agent.ebpf.network.metrics_interval", message: `must be at least 1s, got ${c.network.metrics_interval}` });
    for (const key of ["http_duration_buckets", "http_body_size_buckets"] as const) {
      const bounds = c.network[key];
      for (let i = 1; i < bounds.length; i++)
        if (!(bounds[i]! > bounds[i - 1]!)) {
          problems.push({ path: `agent.ebpf.network.${key}[${i}]`, message: `bounds must increase, got ${bounds[i]} after ${bounds[i - 1]}` });
          break;
        }
    }
    return problems;
  },
};

/** `agent.ebpf.network` of a running configuration. */
export const networkOf = (c: Config): NetworkConfig => keysIn(networkConfig, c.agent.ebpf).network;
