/** What the overhead benchmarks (http, h2, tls, red) share: settling after a reload, priority, target, and the rows of per-round ratios. */
import { firstLine } from "../../test/helpers/wait";
import { bootstrapInterval, mean, median } from "./stats";
import { cpuSeconds, threadCpuBetween, threadCpuSecondsByTid } from "./proc";

/**
 * After a reload that attaches or detaches programs, the agent finishes the old set's teardown and the new set's
 * first polls before a run (measured in http-overhead.ts: 1 s after a reload its threads still used ~1.4% of a
 * core more than at steady state; 2.5 s after, nothing more).
 */
export const SETTLE_MS = 2500;
/** Requests/s traced / untraced: at most 5% fewer. */
export const TARGET_RATIO = 0.95;
/** Server, load generator, agent and receiver run at this nice value so that other work on a shared machine disturbs them less. */
export const NICE = -20;
/** The network set's programs that carry HTTP: attached exactly when the set is on. */
export const NETWORK_PROGRAMS = ["on_set_state", "on_send_length", "on_recv_length"];
/**
 * Every program that runs inside a workload's TCP calls with the network set on (and its TLS set, on by default,
 * whose socket part runs inside on_send_length / on_recv_length with socket capture, in its own tls_send_length /
 * tls_recv_length with syscalls capture): their run time is the BPF time per request the benchmarks report.
 */
export const SOCKET_CALL_PROGRAMS = [...NETWORK_PROGRAMS, "on_retransmit", "tls_send_length", "tls_recv_length", "tls_sock_close"];

/** The median of `pick(run) / run.requests`, in µs. */
export function perRequestUs<R extends { requests: number }>(runs: R[], pick: (r: R) => number): number {
  return median(runs.map((r) => (pick(r) / r.requests) * 1e6));
}

/**
 * The rows of per-round ratios: their median (`name`; with the target when `withTarget`), its 90% bootstrap
 * interval and their mean (each named with `suffix`).
 */
export function ratioRows(ratios: number[], name: string, suffix = "", withTarget = true) {
  const ratio = median(ratios);
  const [low, high] = bootstrapInterval(ratios, median);
  return [
    { name, agent: ratio, unit: "ratio", ...(withTarget ? { target: ">= 0.95 (at most 5% fewer requests/s)", met: ratio >= TARGET_RATIO } : {}) },
    { name: `the same median, low end of its 90% bootstrap interval${suffix}`, agent: low, unit: "ratio" },
    { name: `the same median, high end of its 90% bootstrap interval${suffix}`, agent: high, unit: "ratio" },
    { name: `mean of the same ratios${suffix}`, agent: mean(ratios), unit: "ratio" },
  ];
}

/**
 * The agent's JIT (JavaScriptCore's "JITWorker" threads) compiles the code a load makes hot over its first one to two
 * minutes under it: `BUN_JSC_reportCompileTimes=1` under HTTPS load counted ~700 ms of compiles in the first 60 s
 * (putHttpAttributes alone 100 ms in the FTL tier), and the threads took 1-2 µs of CPU per HTTPS request in that
 * minute against ~0.3 after it. Run in a traced state only, those compiles land in its runs and on the cores the
 * server and the load generator share. The warm-ups below run the load until the JIT threads use less than this
 * share of one core over a chunk.
 */
export const JIT_SETTLED_SHARE = 0.005;
const WARMUP_CHUNK_SECONDS = 10;
const notJit = (threadName: string) => !threadName.startsWith("JIT");

export interface WarmUp {
  seconds: number;
  /** The JIT threads' share of one core in each chunk. */
  jitShares: number[];
  settled: boolean;
}

/**
 * Runs `run(seconds)` (the load, in a traced state) in chunks of WARMUP_CHUNK_SECONDS for at least `minSeconds`, then
 * until the agent's JIT threads used less than JIT_SETTLED_SHARE of a core over the last chunk, for at most `maxSeconds`.
 */
export async function warmUntilJitSettles(agentPid: number, run: (seconds: number) => Promise<unknown>, o: { minSeconds: number; maxSeconds: number }): Promise<WarmUp> {
  const jitShares: number[] = [];
  let seconds = 0;
  for (;;) {
    const chunk = Math.max(1, Math.min(WARMUP_CHUNK_SECONDS, o.maxSeconds - seconds));
    const [total0, others0] = [cpuSeconds(agentPid), threadCpuSecondsByTid(agentPid, notJit)];
    const t0 = performance.now();
    await run(chunk);
    // The process's CPU counts threads that ended too (a JIT thread idle at the end of a chunk may exit): the JIT's is
    // what the other threads alive at the end did not use.
    const jit = cpuSeconds(agentPid) - total0 - threadCpuBetween(others0, threadCpuSecondsByTid(agentPid, notJit));
    jitShares.push(Math.max(0, jit) / ((performance.now() - t0) / 1000));
    seconds += chunk;
    const settled = jitShares[jitShares.length - 1]! < JIT_SETTLED_SHARE;
    if ((seconds >= o.minSeconds && settled) || seconds >= o.maxSeconds) return { seconds, jitShares, settled };
  }
}

/** The note that says how a warm-up went. */
export function warmUpNote(w: WarmUp): string {
  return `warm-up ${w.seconds}s, ${w.settled ? "until" : "stopped at its limit before"} the agent's JIT threads used under ${(JIT_SETTLED_SHARE * 100).toFixed(1)}% of a core over a chunk (${WARMUP_CHUNK_SECONDS}s, or what the limit left); their share per chunk: ${w.jitShares.map((x) => `${(x * 100).toFixed(1)}%`).join(", ")}`;
}

/** A Node http2 h2c server (for `node -e`) answering every stream 200 "hello <path>"; prints its port first. */
export const NODE_H2C_SERVER = `
const http2 = require("node:http2");
const s = http2.createServer();
s.on("stream", (stream, headers) => {
  stream.respond({ ":status": 200, "content-type": "text/plain" });
  stream.end("hello " + headers[":path"]);
});
s.listen(0, "127.0.0.1", () => console.log(s.address().port));
`;

/** A server the benchmark loads: its pid and the port it printed. */
export interface PortServer {
  pid: number;
  port: number;
  /** Kills it and waits for its exit. */
  stop(): Promise<void>;
}

/** Starts `cmd` at NICE; it prints the port it listens on as its first line. */
export async function startPortServer(cmd: string[]): Promise<PortServer> {
  const proc = Bun.spawn(["nice", "-n", String(NICE), ...cmd], { stdout: "pipe", stderr: "inherit" });
  const stop = async () => {
    proc.kill();
    await proc.exited;
  };
  const port = Number(await firstLine(proc.stdout));
  if (!(port > 0)) {
    await stop();
    throw new Error(`${cmd.join(" ")}: no port on its first line`);
  }
  return { pid: proc.pid, port, stop };
}
