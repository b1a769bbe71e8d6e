/**
 * Spawns the compiled agent under a command prefix (setpriv, unshare ...) with a temporary configuration, like
 * test/helpers/agent-process.ts does without one: JSON log records from stderr, the bound address from the
 * "listening" record.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BINARY } from "../../helpers/agent-process";

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
  const dir = mkdtempSync(join(tmpdir(), "svc-rel-wrapped-"));
  const configPath = join(dir, "config.yaml");
  writeFileSync(configPath, config);
  const proc = Bun.spawn([...prefix, BINARY, "--config", configPath], {
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
  });
  const records: Array<Record<string, unknown>> = [];
  let text = "";
  void (async () => {
    const decoder = new TextDecoder();
    let pending = "";
    for await (const chunk of proc.stderr) {
      const s = decoder.decode(chunk, { stream: true });
      text += s;
      pending += s;
      let nl: number;
      while ((nl = pending.indexOf("\n")) !== -1) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        try {
          records.push(JSON.parse(line) as Record<string, unknown>);
        } catch {
          /* not a JSON record */
        }
      }
    }
  })();
  const deadline = Date.now() + timeoutMs;
  let listening: Record<string, unknown> | undefined;
  while (!(listening = records.find((r) => r.msg === "listening"))) {
    if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`agent under ${prefix.join(" ")} did not listen; stderr:\n${text}`);
    await Bun.sleep(20);
  }
  // The agent's pid: the wrappers used here exec the binary, so it is the spawned process itself.
  return {
    pid: proc.pid,
    url: `http://${String(listening.address)}`,
    records,
    stderr: () => text,
    exited: proc.exited,
    async stop() {
      if (proc.exitCode === null) proc.kill("SIGTERM");
      return await proc.exited;
    },
  };
}
