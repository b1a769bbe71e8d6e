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

/** A child process serving on a loopback port it prints as its first stdout line. */
export interface PortServer {
  proc: Bun.Subprocess<"ignore", "pipe", "inherit">;
  port: number;
  pid: number;
  stop(): Promise<void>;
}

/** Spawns `argv` (a server that prints its port first) and waits for that line. */
export async function startPortServer(argv: string[]): Promise<PortServer> {
  const proc = Bun.spawn(argv, { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
  const reader = proc.stdout.getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`${argv[0]} exited before printing its port`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return {
    proc,
    port: Number(text.trim()),
    pid: proc.pid,
    async stop() {
      proc.kill();
      await proc.exited;
    },
  };
}
