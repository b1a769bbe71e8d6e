/** Starts the compiled agent (and a receiver for it to export to) for benchmarks; loopback only. */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

export const BINARY = process.env.SVC_BENCH_BINARY ?? resolve(import.meta.dir, "../../dist/svc-agent");

export interface BenchAgent {
  url: string;
  pid: number;
  /** The file the agent was started with (rewrite it, then POST /admin/reload, to change its configuration). */
  configPath: string;
  stop(): Promise<void>;
}

/** Spawns `dist/svc-agent receive` on a free port; resolves with its address. */
export async function startReceiver(): Promise<{ address: string; pid: number; stop(): Promise<void> }> {
  const proc = Bun.spawn([BINARY, "receive", "--listen", "127.0.0.1:0"], { stdout: "pipe", stderr: "ignore" });
  const reader = proc.stdout.getReader();
  let text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error("receiver exited before listening");
    text += new TextDecoder().decode(value);
    const m = /listening on (\S+:\d+)/.exec(text);
    if (m) {
      void (async () => {
        while (!(await reader.read()).done);
      })();
      return { address: m[1]!, pid: proc.pid, stop: async () => (proc.kill("SIGTERM"), void (await proc.exited)) };
    }
  }
}

/** Spawns the agent with `yaml` (which must listen on 127.0.0.1:0); resolves once it logged "listening". */
export async function startAgent(yaml: string, env: Record<string, string> = {}): Promise<BenchAgent> {
  const dir = mkdtempSync(join(tmpdir(), "svc-bench-"));
  const path = join(dir, "config.yaml");
  writeFileSync(path, yaml);
  const proc = Bun.spawn([BINARY, "--config", path], { stdout: "ignore", stderr: "pipe", env: { PATH: process.env.PATH ?? "", ...env } });
  const reader = proc.stderr.getReader();
  let text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`agent exited before listening:\n${text}`);
    text += new TextDecoder().decode(value);
    const m = /"msg":"listening"[^\n]*"address":"([^"]+)"/.exec(text);
    if (m) {
      void (async () => {
        while (!(await reader.read()).done);
      })();
      return {
        url: `http://${m[1]}`,
        pid: proc.pid,
        configPath: path,
        stop: async () => {
          proc.kill("SIGTERM");
          await proc.exited;
        },
      };
    }
  }
}
