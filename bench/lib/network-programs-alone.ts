/**
 * The kernel side of network + HTTP tracing alone, without the agent: requests/s and server + wrk CPU per request
 * of a local Bun.serve under wrk with the `network` program set (socket capture, as the agent loads it by
 * default, through the agent's own loader) attached and detached, alternating every run with ~0.3 s between the
 * two sides of a pair, so the host's slow and fast spells weigh on both. Nobody reads the ring buffers: records
 * beyond their size are counted as lost in the kernel, as when the agent falls behind. A tool (in bench/lib, not
 * run by bench/run.ts), to tell the programs' cost from the agent's in bench/http-overhead.ts. Needs root and a
 * build (build/network.bpf.o).
 *
 * Usage: bun bench/lib/network-programs-alone.ts [--pairs N] [--seconds S]
 */
import { resolve } from "node:path";
import { mountFs, memlockLimit, openBpfRuntime, raiseMemlock } from "../../ffi";
import { networkSetSpec } from "../../src/collectors/network/spec";
import { checkEnvironment, systemProbe } from "../../src/ebpf/environment";
import { argNumber } from "./args";
import { loadSetFromFile } from "./bpf";
import { cpuSeconds } from "./proc";
import { median, quantile } from "./stats";

const PAIRS = argNumber("pairs", 20);
const SECONDS = argNumber("seconds", 2);
const PAUSE_MS = 300;
const OBJECT = resolve(import.meta.dir, "../../build/network.bpf.o");
const RING_BYTES = 16 * 1024 * 1024;
const SERVER = `const s = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch(req) { return new Response("hello " + new URL(req.url).pathname); } }); console.log(s.port);`;

const env = checkEnvironment(systemProbe({ mountFs, memlockLimit, raiseMemlock }));
if (env.blocked) throw new Error(`eBPF unavailable: ${env.blocked}`);
const runtime = await openBpfRuntime(process.env);

async function attach(): Promise<() => void> {
  const spec = networkSetSpec({ selfPid: process.pid, http: true, httpCapture: "socket", httpExchangesPerSecond: 250, maxConnections: 65_536 });
  const set = await loadSetFromFile(runtime, spec, OBJECT, RING_BYTES);
  return () => set.close();
}

const server = Bun.spawn([process.execPath, "-e", SERVER], { stdout: "pipe", stderr: "inherit" });
try {
  const reader = server.stdout.getReader();
  const port = Number(new TextDecoder().decode((await reader.read()).value).trim());
  reader.releaseLock();
  const url = `http://127.0.0.1:${port}/bench?q=1`;
  const run = async () => {
    const c0 = cpuSeconds(server.pid);
    const w = Bun.spawn(["wrk", "-t1", "-c16", `-d${SECONDS}s`, url], { stdout: "pipe", stderr: "pipe" });
    const out = await new Response(w.stdout).text();
    await w.exited;
    const u = w.resourceUsage();
    const wrkCpu = u ? Number(u.cpuTime.user + u.cpuTime.system) / 1e6 : 0;
    const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? NaN);
    if (!(requests > 0)) throw new Error(`wrk gave no figure:\n${out}`);
    return { rps: requests / SECONDS, usPerRequest: ((cpuSeconds(server.pid) - c0 + wrkCpu) / requests) * 1e6 };
  };
  await run();
  const rpsRatios: number[] = [];
  const cpuRatios: number[] = [];
  for (let i = 0; i < PAIRS; i++) {
    const off = await run();
    const detach = await attach();
    await Bun.sleep(PAUSE_MS);
    let on;
    try {
      on = await run();
    } finally {
      detach();
    }
    await Bun.sleep(PAUSE_MS);
    rpsRatios.push(on.rps / off.rps);
    cpuRatios.push(on.usPerRequest / off.usPerRequest);
    console.log(`pair ${i + 1}: detached ${Math.round(off.rps)} req/s ${off.usPerRequest.toFixed(1)} us; attached ${Math.round(on.rps)} req/s ${on.usPerRequest.toFixed(1)} us`);
  }
  const q = (xs: number[], f: number) => quantile(xs, f).toFixed(3);
  console.log(`requests/s attached/detached: median ${median(rpsRatios).toFixed(3)} (quartiles ${q(rpsRatios, 0.25)} / ${q(rpsRatios, 0.75)})`);
  console.log(`server + wrk CPU per request attached/detached: median ${median(cpuRatios).toFixed(3)} (quartiles ${q(cpuRatios, 0.25)} / ${q(cpuRatios, 0.75)})`);
} finally {
  server.kill();
  await server.exited;
}
