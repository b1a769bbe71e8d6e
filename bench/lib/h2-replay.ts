/**
 * User-space CPU per HTTP/2 request of the network component, free of the host's noise as far as a shared machine
 * allows: records captured once from a real run, replayed in process. A tool (in bench/lib, not run by
 * bench/run.ts), to weigh changes to the HTTP/2 path that bench/h2-overhead.ts cannot resolve.
 *
 * `--capture FILE` (root, after a build: build/network.bpf.o): loads the network set through the agent's loader
 * (HTTP on, socket capture, no HTTP/2 record limit, 64 MiB ring) and writes every `http_events` record of an
 * h2load run (-t1 -c4 -m10 -n N, both sides traced) against a Node http2 h2c server to FILE, length-prefixed.
 * `--replay FILE`: feeds those records through the network set's own http_events decoder and the network component
 * (HTTP/2 frames and HPACK, exchanges, RED counting, span budget at max_spans_per_second 250 on a clock that follows
 * the records' timestamps, span build and export to a transport that drops the bytes), 64 records per event-loop
 * turn, round after round (timestamps moved on each round); prints process user + system CPU per request of each
 * round and their median. Run it from two checkouts on one capture to compare them, alternating.
 *
 * Usage: bun bench/lib/h2-replay.ts --capture FILE [--requests N] | --replay FILE [--requests N] [--rounds R]
 */
import { readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { resolve } from "node:path";
import { argNumber } from "./args";
import { median } from "./stats";

const REQUESTS = argNumber("requests", 100_000);
const ROUNDS = argNumber("rounds", 9);
const arg = (name: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
};

async function capture(file: string): Promise<void> {
  const { mountFs, memlockLimit, openBpfRuntime, raiseMemlock } = await import("../../ffi");
  const { networkSetSpec } = await import("../../src/collectors/network/spec");
  const { checkEnvironment, systemProbe } = await import("../../src/ebpf/environment");
  const { loadSetFromFile } = await import("./bpf");
  const { NODE_H2C_SERVER, startPortServer } = await import("./overhead");
  const env = checkEnvironment(systemProbe({ mountFs, memlockLimit, raiseMemlock }));
  if (env.blocked) throw new Error(`eBPF unavailable: ${env.blocked}`);
  const runtime = await openBpfRuntime(process.env);
  const server = await startPortServer(["node", "-e", NODE_H2C_SERVER]);
  const spec = networkSetSpec({ selfPid: process.pid, http: true, httpCapture: "socket", httpExchangesPerSecond: 250, h2RecordsPerSecond: 10_000_000, maxConnections: 65_536, redMetrics: true });
  const set = await loadSetFromFile(runtime, spec, resolve(import.meta.dir, "../../build/network.bpf.o"), 64 * 2 ** 20);
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  try {
    const reader = set.readers.find((r) => r.map === "http_events")!.reader;
    const drain = () =>
      reader.consume((view, offset, length) => {
        const c = new Uint8Array(4 + length);
        new DataView(c.buffer).setUint32(0, length, true);
        c.set(new Uint8Array(view.buffer, view.byteOffset + offset, length), 4);
        chunks.push(c);
        bytes += c.length;
      }, 2 ** 30);
    const timer = setInterval(drain, 5);
    const p = Bun.spawn(["h2load", "-t1", "-c4", "-m10", "-n", String(REQUESTS), `http://127.0.0.1:${server.port}/bench`], { stdout: "pipe" });
    const out = await new Response(p.stdout).text();
    await p.exited;
    await Bun.sleep(200);
    drain();
    clearInterval(timer);
    console.log(/requests: .*/.exec(out)?.[0] ?? out);
  } finally {
    set.close();
    await server.stop();
  }
  const all = new Uint8Array(bytes);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.length;
  }
  writeFileSync(file, all);
  console.log(`${chunks.length} records, ${bytes} bytes -> ${file}`);
}

async function replay(file: string): Promise<void> {
  const { parseConfig } = await import("../../src/config/load");
  const { Logger } = await import("../../src/log/logger");
  const { StatusAggregator } = await import("../../src/status/aggregator");
  const { AgentMetrics } = await import("../../src/telemetry/metrics");
  const { TaskRegistry } = await import("../../src/telemetry/tasks");
  const { EbpfCore, NATIVE_DEPS } = await import("../../src/ebpf");
  const { OtlpPipeline } = await import("../../src/export/pipeline");
  const { TransportSender } = await import("../../src/export/sender");
  const { WorkloadRegistry } = await import("../../src/workloads");
  const { ContainerDirectory } = await import("../../src/discovery/directory");
  const { NetworkCollector } = await import("../../src/collectors/network/component");
  const { networkSetSpec } = await import("../../src/collectors/network/spec");
  type AgentContext = import("../../src/collectors/context").AgentContext;
  const decode = networkSetSpec({ selfPid: 1, http: true, httpCapture: "socket", httpExchangesPerSecond: 250, maxConnections: 1024 }).ringBuffers.find((r) => r.map === "http_events")!.decode;

  const raw = readFileSync(file);
  const view = new DataView(new Uint8Array(raw).buffer);
  const records: number[] = [];
  for (let at = 0; at < view.byteLength; at += 4 + view.getUint32(at, true)) records.push(at + 4, view.getUint32(at, true));
  const first = view.getBigUint64(records[0]!, true);
  const last = view.getBigUint64(records[records.length - 2]!, true);
  const roundNs = last - first + 1_000_000n;

  const config = parseConfig("agent:\n  ebpf:\n    enabled: false\n    network:\n      max_spans_per_second: 250\n", {});
  const tasks = new TaskRegistry();
  const metrics = new AgentMetrics("svc", tasks);
  const logger = new Logger({ sink: () => {} });
  const pipeline = new OtlpPipeline({ config, metrics, logger, tasks });
  pipeline.connect(new TransportSender({ send: async () => ({ kind: "success", rejected: 0, message: "" }), ready: () => true, close() {} }));
  const base = { config, logger, status: new StatusAggregator(), metrics, tasks, env: {}, pipeline };
  const ebpf = new EbpfCore(base as never, NATIVE_DEPS);
  const workloads = new WorkloadRegistry(new ContainerDirectory(), { selfPid: -1 });
  workloads.attachProcesses(ebpf.processes);
  /* The captured processes must not be taken for the agent itself. */
  const collector = new NetworkCollector({ ...base, workloads, ebpf } as unknown as AgentContext, ebpf, 0x7fff_fff0);

  /* The span budget's clock (performance.now) follows the records. */
  let nowMs = 0;
  performance.now = () => nowMs;
  const feed = async () => {
    for (let i = 0; i < records.length; i += 2) {
      const at = records[i]!;
      const ts = view.getBigUint64(at, true) + roundNs;
      view.setBigUint64(at, ts, true);
      nowMs = Number(ts / 1000n) / 1000;
      collector.handle(decode(view, at, records[i + 1]!));
      if ((i >> 1) % 64 === 63) await Promise.resolve();
    }
    await Promise.resolve();
  };
  const cpuUs = () => {
    const c = process.cpuUsage();
    return c.user + c.system;
  };
  await feed();
  await feed();
  const perRequest: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const before = { ...collector.counters };
    const c0 = cpuUs();
    await feed();
    perRequest.push((cpuUs() - c0) / REQUESTS);
    const exchanges = collector.counters.httpSpans - before.httpSpans;
    const spans = exchanges - (collector.counters.dropped - before.dropped);
    console.log(`round ${r + 1}: ${perRequest[r]!.toFixed(3)} us per request (${exchanges} exchanges, ${spans} spans)`);
  }
  console.log(`median ${median(perRequest).toFixed(3)} us per request of ${REQUESTS} (${records.length / 2} records a round); load average ${loadavg().map((x) => x.toFixed(2)).join(" ")}`);
  await pipeline.shutdown(AbortSignal.timeout(5000));
}

const captureFile = arg("capture");
const replayFile = arg("replay");
if (captureFile) await capture(captureFile);
else if (replayFile) await replay(replayFile);
else throw new Error("usage: bun bench/lib/h2-replay.ts --capture FILE [--requests N] | --replay FILE [--requests N] [--rounds R]");
process.exit(0);
