/**
 * The compiled agent under a command prefix (setpriv, unshare ...): test/helpers/agent-process.ts's spawnAgent
 * with a prefix, seen through the fields the eBPF fault tests read.
 */
import { spawnAgent } from "../../helpers/agent-process";

export interface WrappedAgent {
  pid: number;
  url: string;
  records: Array<Record<string, unknown>>;
  stderr(): string;
  exited: Promise<number>;
  stop(): Promise<number>;
}

/** `prefix` runs the binary: the command line is [...prefix, BINARY, "--config", path]. */
export async function spawnWrapped(prefix: string[], config: string, timeoutMs = 30_000): Promise<WrappedAgent> {
  const agent = await spawnAgent({ prefix, config, timeoutMs });
  // The agent's pid: the wrappers used here exec the binary, so it is the spawned process itself.
  return {
    pid: agent.proc.pid,
    url: agent.url,
    records: agent.records,
    stderr: agent.stderr,
    exited: agent.proc.exited,
    stop: agent.stop,
  };
}
