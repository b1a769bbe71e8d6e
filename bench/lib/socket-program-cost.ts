/**
 * BPF time of each program in the socket calls, per request: the compiled agent (dist/svc-agent, or
 * SVC_BENCH_BINARY) with the network set and HTTP capture on (and the TLS set, unless `--no-tls`), a local
 * Bun.serve under wrk (one thread, 16 keep-alive connections, loopback) for --seconds with the kernel's bpf_stats
 * on; prints per program its runs per request, ns per run and ns per request (both ends of a request are traced:
 * the server's calls and wrk's), and beside them bench/lib/socket-floor.ts's programs on the same tracepoints: two
 * empty ones (floor_*: the cost of a run itself) and one per step of the agent's programs (part_*: a clock read, a
 * 12-byte user read, a per-CPU hash count), not counted in the total. A tool (in bench/lib, not run by bench/run.ts) to compare program sets or builds
 * (run it with SVC_BENCH_BINARY set to each, alternating). Needs root.
 *
 * Usage: bun bench/lib/socket-program-cost.ts [--seconds S] [--no-tls]
 */
import { BPF_STATS_PATH, attachedPrograms, startAgent, startReceiver } from "./agent";
import { startPortServer } from "./overhead";
import { argNumber } from "./args";
import { runWrk } from "./wrk";
import { quietConfig } from "../../test/helpers/quiet-config";
import { attachSocketFloor } from "./socket-floor";

const SECONDS = argNumber("seconds", 5);
const TLS = !process.argv.includes("--no-tls");

const receiver = await startReceiver();
const agent = await startAgent(
  quietConfig({ endpoint: receiver.address, ebpf: `    enabled: true\n    network:\n      enabled: true\n      http: true\n      tls: ${TLS}\n    syscalls:\n      enabled: false` }),
);
try {
  for (let i = 0; i < 300; i++) {
    const r = (await (await fetch(`${agent.url}/ready`)).json()) as { checks?: Record<string, string> };
    if (r.checks?.ebpf === "ok") break;
    await Bun.sleep(100);
  }
  const server = await startPortServer(["bun", "-e", `const s = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("ok") }); console.log(s.port);`]);
  try {
    const floor = await attachSocketFloor({ parts: true, least: true });
    const names = new Map((await attachedPrograms(agent)).map((p) => [p.id, p.name]));
    for (const [id, name] of floor.names) names.set(id, name);
    const snapshot = () => {
      const all = JSON.parse(Bun.spawnSync(["bpftool", "-j", "prog", "show"]).stdout.toString() || "[]") as Array<{ id: number; run_time_ns?: number; run_cnt?: number }>;
      return new Map(all.filter((p) => names.has(p.id)).map((p) => [names.get(p.id)!, { ns: p.run_time_ns ?? 0, runs: p.run_cnt ?? 0 }]));
    };
    const before = (await Bun.file(BPF_STATS_PATH).text()).trim();
    await Bun.write(BPF_STATS_PATH, "1");
    const a = snapshot();
    const run = await runWrk(["wrk", "-t1", "-c16", `-d${SECONDS}s`, `http://127.0.0.1:${server.port}/`]);
    const b = snapshot();
    await Bun.write(BPF_STATS_PATH, before);
    floor.close();
    console.log(`${run.requests} requests, ${Math.round(run.rps)}/s; tls ${TLS}`);
    let total = 0;
    for (const [name, v] of b) {
      const ns = v.ns - (a.get(name)?.ns ?? 0);
      const runs = v.runs - (a.get(name)?.runs ?? 0);
      if (runs === 0) continue;
      if (![...floor.names.values()].includes(name)) total += ns;
      console.log(`${name.padEnd(24)} runs/request ${(runs / run.requests).toFixed(2)}  ns/run ${(ns / runs).toFixed(0)}  ns/request ${(ns / run.requests).toFixed(0)}`);
    }
    console.log(`every program: ${(total / run.requests).toFixed(0)} ns/request (the floor_ and part_ programs not counted)`);
  } finally {
    await server.stop();
  }
} finally {
  await agent.stop();
  await receiver.stop();
}
