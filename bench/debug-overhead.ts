/**
 * Cost of debug mode and self-tracing, each side by side with a reference measured in the same run:
 *  1. in-process: ns per `tasks.track` of an empty operation with no observer (reference), with the debug
 *     runtime on (stacks captured, trace/block bookkeeping), and with the tracer at sample_rate 0.01 and 1.0
 *     (spans handed to a counting pipeline);
 *  2. the compiled agent under wrk (GET /status, loopback): requests/s with debug mode and tracing off
 *     (reference), with --debug, and with tracing at 0.01 and 1.0 exporting to a local `svc-agent receive`;
 *  3. the CPU profile's own cost: requests/s while /debug/pprof/profile samples, against the same agent idle.
 * Usage: bun bench/debug-overhead.ts [--seconds N] [--ops N] [--rounds R]
 */
import type { Config } from "../src/config/schema";
import { DebugRuntime } from "../src/debug/runtime";
import { TaskRegistry } from "../src/telemetry/tasks";
import { Tracer } from "../src/tracing";
import { startAgent, startReceiver, type BenchAgent } from "./lib/agent";
import { report, type BenchRow } from "./lib/report";
import { wrkRps } from "./lib/wrk";
import { median } from "./lib/stats";
import { cpuSeconds } from "./lib/proc";
import { quietConfig } from "../test/helpers/quiet-config";
import { argNumber } from "./lib/args";

const SECONDS = argNumber("seconds", 3);
const OPS = argNumber("ops", 200_000);
const ROUNDS = argNumber("rounds", 3);

async function nsPerTrack(setup: (tasks: TaskRegistry) => () => void): Promise<number> {
  const tasks = new TaskRegistry();
  const teardown = setup(tasks);
  const noop = async () => undefined;
  for (let i = 0; i < 10_000; i++) await tasks.track("warm", noop);
  const t0 = performance.now();
  for (let i = 0; i < OPS; i++) await tasks.track("op", noop);
  const ns = ((performance.now() - t0) * 1e6) / OPS;
  teardown();
  return ns;
}

function tracerOn(rate: number) {
  return (tasks: TaskRegistry) => {
    const config = { self_telemetry: { tracing: { enabled: true, sample_rate: rate } } } as unknown as Config;
    const tracer = new Tracer({ config: () => config, pipeline: { submit: (_s, items) => items.length } });
    tasks.observers.add(tracer);
    return () => tasks.observers.delete(tracer);
  };
}

const rows: BenchRow[] = [];
const reference = await nsPerTrack(() => () => undefined);
const debugNs = await nsPerTrack((tasks) => {
  const r = new DebugRuntime(tasks);
  r.setEnabled(true);
  return () => r.setEnabled(false);
});
rows.push({ name: "tasks.track, debug runtime on (stacks captured)", agent: debugNs, reference, referenceName: "no observer", unit: "ns/op" });
rows.push({ name: "tasks.track, tracer sample_rate 0.01", agent: await nsPerTrack(tracerOn(0.01)), reference, referenceName: "no observer", unit: "ns/op" });
rows.push({ name: "tasks.track, tracer sample_rate 1.0", agent: await nsPerTrack(tracerOn(1)), reference, referenceName: "no observer", unit: "ns/op" });

const base = (selfTelemetry: string) => quietConfig({ selfTelemetry });
const receiver = await startReceiver();
const env = { OTLP_ENDPOINT: receiver.address };
/** Requests/s under wrk and the agent's CPU microseconds per request (less sensitive to other load on the machine). */
const measureOnce = async (a: BenchAgent, during?: (url: string) => Promise<unknown>) => {
  const side = during?.(a.url);
  const cpu0 = cpuSeconds(a.pid);
  const rps = await wrkRps(`${a.url}/status`, { seconds: SECONDS });
  const cpuUs = ((cpuSeconds(a.pid) - cpu0) * 1e6) / (rps * SECONDS);
  await side;
  return { rps, cpuUs };
};
const debugYaml = base("  debug:\n    enabled: true");
const variants: Array<{ name: string; yaml: string; during?: (url: string) => Promise<unknown> }> = [
  { name: "off", yaml: base("") },
  { name: "debug", yaml: debugYaml },
  { name: "trace0.01", yaml: base("  tracing:\n    enabled: true\n    sample_rate: 0.01") },
  { name: "trace1", yaml: base("  tracing:\n    enabled: true\n    sample_rate: 1.0") },
  { name: "profiling", yaml: debugYaml, during: (url) => fetch(`${url}/debug/pprof/profile?seconds=${SECONDS}`).then((r) => r.arrayBuffer()) },
];
// Every variant runs at once and is measured in turn, ROUNDS times: drifting load on the machine hits all alike.
const agents = await Promise.all(variants.map((v) => startAgent(v.yaml, env)));
for (const a of agents) await wrkRps(`${a.url}/status`, { seconds: 1 });
const samples = new Map<string, Array<{ rps: number; cpuUs: number }>>();
for (let round = 0; round < ROUNDS; round++)
  for (const [i, v] of variants.entries()) {
    const list = samples.get(v.name) ?? [];
    list.push(await measureOnce(agents[i]!, v.during));
    samples.set(v.name, list);
  }
for (const a of agents) await a.stop();
const fig = (name: string) => ({ rps: median(samples.get(name)!.map((x) => x.rps)), cpuUs: median(samples.get(name)!.map((x) => x.cpuUs)) });
const both = (name: string, m: { rps: number; cpuUs: number }, ref: { rps: number; cpuUs: number }, referenceName: string) => {
  rows.push({ name: `${name}: requests/s`, agent: m.rps, reference: ref.rps, referenceName, unit: "req/s" });
  rows.push({ name: `${name}: agent CPU per request`, agent: m.cpuUs, reference: ref.cpuUs, referenceName, unit: "us" });
};
both("GET /status, debug mode on", fig("debug"), fig("off"), "debug and tracing off");
both("GET /status, tracing sample_rate 0.01", fig("trace0.01"), fig("off"), "debug and tracing off");
both("GET /status, tracing sample_rate 1.0 (every request a span, exported)", fig("trace1"), fig("off"), "debug and tracing off");
both("GET /status while a CPU profile is taken", fig("profiling"), fig("debug"), "same settings (debug on), no profile");
await receiver.stop();
report({ bench: "debug-overhead", rows, notes: [`${OPS} operations per in-process figure; wrk 1 thread, 32 connections, ${SECONDS} s per run, median of ${ROUNDS} rounds with every variant running at once and measured in turn`] });
