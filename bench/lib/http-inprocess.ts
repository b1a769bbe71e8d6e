/**
 * In-process cost of the HTTP interface's hot routes: microseconds of CPU per `app.handle` answer of GET /healthz,
 * /status and /metrics (agent built in-process from the benchmark's configuration, no socket), to judge changes
 * by CPU time rather than by requests/s on a shared machine (the minimum over rounds is the least disturbed figure).
 * The app is built as the listener builds it. Run with `bun --cpu-prof --cpu-prof-dir=D` and summarise with
 * `bun bench/lib/cpuprofile.ts D/*.cpuprofile` to see where the time goes. A tool (in bench/lib, not run by bench/run.ts).
 *
 * Usage: bun bench/lib/http-inprocess.ts [--requests N] [--rounds R] [--path /status]
 */
import { createServer } from "../../src/server/app";
import { inProcessAgent } from "../../test/helpers/in-process";
import { argNumber, argText } from "./args";

const REQUESTS = argNumber("requests", 20_000);
const ROUNDS = argNumber("rounds", 3);
const PATHS = argText("path") ? [argText("path")!] : ["/healthz", "/status", "/metrics"];
const WARMUP_REQUESTS = 2_000;

const a = await inProcessAgent();
// As the listener builds it (answers of the hot routes not re-checked at run time).
const app = createServer(a.deps, { checkAnswers: false });
try {
  const results: Record<string, number[]> = {};
  const wall: Record<string, number[]> = {};
  for (const path of PATHS) {
    const url = `http://localhost${path}`;
    const once = async () => {
      const r = await app.handle(new Request(url));
      if (r.status !== 200) throw new Error(`${path} answered ${r.status}`);
      await r.arrayBuffer();
    };
    for (let i = 0; i < WARMUP_REQUESTS; i++) await once();
    for (let round = 0; round < ROUNDS; round++) {
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      for (let i = 0; i < REQUESTS; i++) await once();
      const c = process.cpuUsage(c0);
      (wall[path] ??= []).push(((performance.now() - t0) * 1000) / REQUESTS);
      (results[path] ??= []).push((c.user + c.system) / REQUESTS);
    }
  }
  for (const [path, us] of Object.entries(results)) {
    const sorted = [...us].sort((x, y) => x - y);
    const w = [...wall[path]!].sort((x, y) => x - y);
    console.log(`${path.padEnd(10)} us/request: CPU min ${sorted[0]!.toFixed(2)} median ${sorted[Math.floor(sorted.length / 2)]!.toFixed(2)}, wall median ${w[Math.floor(w.length / 2)]!.toFixed(2)}  (CPU rounds: ${us.map((u) => u.toFixed(2)).join(", ")})`);
  }
} finally {
  await a.stop();
}
