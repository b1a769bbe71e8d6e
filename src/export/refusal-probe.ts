/**
 * Whether the backend still refuses TCP connections: the cheap stand-in for a connectivity check (an empty
 * Export call) while the last outcome was `connection refused`. A refused gRPC call costs the agent ~1.5-2 ms
 * of CPU here (channel state machine, status and error objects), a refused Bun.connect ~0.4 ms; with a backend
 * down, the check runs every backoff.initial. Anything but a refusal (connected, other errors, no answer within
 * the bound) says "not refused", and the caller makes the real Export call, whose outcome then counts.
 */
import { env } from "node:process";

/** Environment variables that make grpc-js connect through a proxy (then the endpoint's own refusal says nothing). */
const PROXY_VARIABLES = ["grpc_proxy", "https_proxy", "http_proxy", "GRPC_PROXY", "HTTPS_PROXY", "HTTP_PROXY"] as const;

/** host and port of an `otlp.endpoint` (`host:port` or `[v6]:port`, as the configuration validates it). */
export function endpointAddress(endpoint: string): { host: string; port: number } | undefined {
  const i = endpoint.lastIndexOf(":");
  const port = Number(endpoint.slice(i + 1));
  if (i <= 0 || !Number.isInteger(port) || port <= 0 || port > 65_535) return undefined;
  return { host: endpoint.slice(0, i).replace(/^\[|\]$/g, ""), port };
}

/** Whether grpc-js would reach the endpoint directly (no proxy variable set), so that a refusal there is its refusal. */
export function directConnection(environment: Record<string, string | undefined> = env): boolean {
  return PROXY_VARIABLES.every((v) => !environment[v]);
}

/** Resolves true only when a TCP connection to `endpoint` is refused (ECONNREFUSED) within `timeoutMs`. */
export async function connectionRefused(endpoint: string, timeoutMs: number): Promise<boolean> {
  const address = endpointAddress(endpoint);
  if (!address) return false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const connect = Bun.connect({ hostname: address.host, port: address.port, socket: { data() {}, error() {} } }).then(
    (socket) => {
      socket.end();
      return false;
    },
    (e: unknown) => (e as NodeJS.ErrnoException | undefined)?.code === "ECONNREFUSED",
  );
  const bound = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  try {
    return await Promise.race([connect, bound]);
  } finally {
    clearTimeout(timer);
  }
}
