/**
 * e2e harness: spawns the compiled binary (dist/svc-agent) with a temporary configuration, waits for its
 * "listening" log record to learn the bound address (the config uses port 0), and collects its log records.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Subprocess } from "bun";
import { QUIET_CONFIG } from "./quiet-config";

export { QUIET_CONFIG, quietConfig, type QuietConfigOptions } from "./quiet-config";

export const BINARY = resolve(import.meta.dir, "../../dist/svc-agent");

export interface AgentProcess {
  proc: Subprocess<"ignore", "pipe", "pipe">;
  /** http://host:port of the HTTP interface. */
  url: string;
  configPath: string;
  dir: string;
  /** Every JSON log record seen so far (stderr). */
  records: Array<Record<string, unknown>>;
  /** Raw stderr text seen so far. */
  stderr(): string;
  /** Resolves with the first record matching `pred` (already seen or future); rejects after `timeoutMs`. */
  waitFor(pred: (r: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  /** Sends SIGTERM and resolves with the exit code. */
  stop(): Promise<number>;
}

export interface SpawnOptions {
  /** YAML text of the configuration; `self_telemetry.listen` should be `127.0.0.1:0`. */
  config?: string;
  args?: string[];
  env?: Record<string, string>;
  /** A command that runs the binary (setpriv, unshare ...): the command line is [...prefix, BINARY, ...args]. */
  prefix?: string[];
  /** Wait for the "listening" record (default true). */
  waitListening?: boolean;
  timeoutMs?: number;
}

export async function spawnAgent(options: SpawnOptions = {}): Promise<AgentProcess> {
  const dir = mkdtempSync(join(tmpdir(), "svc-agent-e2e-"));
  const configPath = join(dir, "config.yaml");
  writeFileSync(configPath, options.config ?? QUIET_CONFIG);
  const proc = Bun.spawn([...(options.prefix ?? []), BINARY, ...(options.args ?? ["--config", configPath])], {
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...options.env },
  });
  const records: Array<Record<string, unknown>> = [];
  let text = "";
  const waiters: Array<{ pred: (r: Record<string, unknown>) => boolean; resolve: (r: Record<string, unknown>) => void }> = [];
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
          const r = JSON.parse(line) as Record<string, unknown>;
          records.push(r);
          for (const w of [...waiters]) if (w.pred(r)) {
            waiters.splice(waiters.indexOf(w), 1);
            w.resolve(r);
          }
        } catch {
          /* not a JSON record */
        }
      }
    }
  })();

  const waitFor = (pred: (r: Record<string, unknown>) => boolean, timeoutMs = 15_000) => {
    const seen = records.find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise<Record<string, unknown>>((resolvePromise, reject) => {
      const timer = setTimeout(() => reject(new Error(`no matching log record within ${timeoutMs} ms; stderr:\n${text}`)), timeoutMs);
      waiters.push({ pred, resolve: (r) => (clearTimeout(timer), resolvePromise(r)) });
      void proc.exited.then((code) => {
        clearTimeout(timer);
        reject(new Error(`agent exited with ${code} before the record appeared; stderr:\n${text}`));
      });
    });
  };

  const agent: AgentProcess = {
    proc,
    url: "",
    configPath,
    dir,
    records,
    stderr: () => text,
    waitFor,
    async stop() {
      if (proc.exitCode === null) proc.kill("SIGTERM");
      return await proc.exited;
    },
  };
  if (options.waitListening ?? true) {
    const r = await waitFor((r) => r.msg === "listening", options.timeoutMs);
    agent.url = `http://${String(r.address)}`;
  }
  return agent;
}
