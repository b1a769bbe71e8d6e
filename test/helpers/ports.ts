/** Loopback ports for tests. */

/**
 * A loopback TCP port nobody listens on now: listened on (the kernel picks it), then closed. Free for a test to
 * bind, or refused when connected to (until someone else binds it).
 */
export function closedLoopbackPort(): number {
  const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = l.port;
  l.stop(true);
  return port;
}
