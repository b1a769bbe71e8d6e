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

/** The sum of the samples of the agent's /metrics whose line starts with `name` (a family name, or a name with labels). */
export async function metricSum(agent: BenchAgent, name: string): Promise<number> {
  const text = await (await fetch(`${agent.url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split("\n")) if (line.startsWith(name) && !line.startsWith("#")) sum += Number(line.split(" ").at(-1));
  return sum;
}

/** The agent's eBPF programs that are attached now (GET /status/ebpf). */
export async function attachedPrograms(agent: BenchAgent): Promise<Array<{ name: string; id: number }>> {
  const view = (await (await fetch(`${agent.url}/status/ebpf`)).json()) as { programs?: Array<{ name: string; id: number; attached: boolean }> };
  return (view.programs ?? []).filter((p) => p.attached);
}

/**
 * Slots `indexes` of a per-CPU u64 array map named `mapName` that the agent's attached program `program` uses,
 * each summed over CPUs (bpftool; the agent's own map, not another process' of the same name).
 */
export async function programMapSums(agent: BenchAgent, program: string, mapName: string, indexes: number[]): Promise<number[]> {
  const prog = (await attachedPrograms(agent)).find((p) => p.name === program);
  if (!prog) return indexes.map(() => 0);
  const json = (args: string[]) => JSON.parse(Bun.spawnSync(["bpftool", "-j", ...args]).stdout.toString() || "{}");
  const mapIds = (json(["prog", "show", "id", String(prog.id)]) as { map_ids?: number[] }).map_ids ?? [];
  const id = mapIds.find((m) => (json(["map", "show", "id", String(m)]) as { name?: string }).name === mapName);
  if (id === undefined) return indexes.map(() => 0);
  return indexes.map((i) => {
    const key = [i & 255, (i >> 8) & 255, (i >> 16) & 255, i >>> 24].map(String);
    const r = json(["map", "lookup", "id", String(id), "key", ...key]) as { formatted?: { values?: Array<{ value: number }> } };
    return (r.formatted?.values ?? []).reduce((n, v) => n + Number(v.value), 0);
  });
}

/** kernel.bpf_stats_enabled: 1 while programs' run_time_ns and run_cnt are counted (each run then reads the clock twice). */
export const BPF_STATS_PATH = "/proc/sys/kernel/bpf_stats_enabled";

/** run_time_ns and run_cnt summed over programs `ids` (kernel.bpf_stats_enabled must be 1). */
export function bpfRunStats(ids: Set<number>): { ns: number; runs: number } {
  if (ids.size === 0) return { ns: 0, runs: 0 };
  const r = Bun.spawnSync(["bpftool", "-j", "prog", "show"]);
  const progs = JSON.parse(r.stdout.toString() || "[]") as Array<{ id: number; run_time_ns?: number; run_cnt?: number }>;
  let ns = 0;
  let runs = 0;
  for (const p of progs) if (ids.has(p.id)) (ns += p.run_time_ns ?? 0), (runs += p.run_cnt ?? 0);
  return { ns, runs };
}

/**
 * Switches a running agent to another configuration: rewrites its file, POSTs /admin/reload, then asks `reached`
 * every 50 ms until it answers true (anything else is what it saw, for the error after `timeoutMs`).
 */
export async function reloadInto(agent: BenchAgent, yaml: string, name: string, reached: () => Promise<true | string>, timeoutMs = 30_000): Promise<void> {
  writeFileSync(agent.configPath, yaml);
  const res = await fetch(`${agent.url}/admin/reload`, { method: "POST" });
  if (!res.ok) throw new Error(`reload to "${name}": ${res.status} ${await res.text()}`);
  const end = Date.now() + timeoutMs;
  for (;;) {
    const seen = await reached();
    if (seen === true) return;
    if (Date.now() > end) throw new Error(`"${name}" not reached${seen ? `: ${seen}` : ""}`);
    await Bun.sleep(50);
  }
}
