/**
 * Cost per span (issue 22): user-space CPU to decode, pair, build and export one HTTP/1.1 exchange, from the
 * kernel's `http_events` records to the encoded OTLP request handed to the transport. No eBPF: records laid out as
 * ffi/bpf/network.bpf.c writes them (a request read and its response written on keep-alive server connections of
 * two live processes, this one and its parent) go through the real path in process: decodeHttpEventReused (the
 * decoder of the agent's http_events ring: one record object refilled, the captured bytes a view of the record), the network
 * component (exchange pairing, span budget, span build, process and workload labels from the process table and
 * the workload registry), the export pipeline (item encoding, queue, batcher, request assembly) and a transport
 * that only counts the bytes handed to it. CPU is the process's user time (process.cpuUsage) over each round,
 * per exchange; the reference, measured in the same run and rounds, is the same count of bare encodes: one span
 * as the path built it, encoded by the pipeline's encoder and assembled into requests of the same batch size.
 * Target: <= 5 us per exchange, the path and the exemplar step below together. Every exchange must reach the
 * transport as a span (checked).
 * The rounds are the steady state: the warm-up (200,000 exchanges by default, then untimed whole rounds until one
 * passes without CPU on JSC's compiler threads, up to --warmup-rounds) lasts until the compiler threads have compiled
 * the path (their CPU counts in process.cpuUsage: over the first 20,000 exchanges it adds 2 to 8 us per exchange, a
 * one-off cost a long-running agent pays once). The warm-up's own cost per exchange, the untimed rounds it took and
 * the compiler threads' CPU during the rounds are reported beside the figure.
 * The default agent, whose RED metrics the kernel counts, also keeps each span's ids as the exemplar of its RED
 * series; the path here has no kernel maps and does not. Each round measures that step apart and adds it to the
 * path's figure: one exemplar per exchange, through the agent's RED aggregator (route templater, process labeler
 * and workload registry as the component builds them), the series' route learnt first as the kernel's counts
 * would teach it. Every request here has the same path: the aggregator's exemplar lookups all hit its cache of
 * series found (a span unlike the last ones there costs a full lookup, 0.9 us measured before that cache).
 * Each round also runs the path cut short, for the cost of each stage (cumulative): decoding the records only;
 * decode, pairing, parsing and span building (the spans handed to the pipeline are dropped); the same with each
 * span encoded by an encoder of its own (no queue); the whole path.
 *
 * Usage: bun bench/span-cost.ts [--exchanges N] [--rounds R] [--warmup N] [--warmup-rounds N]
 * A CPU profile of the run: `bun --cpu-prof --cpu-prof-dir=DIR bench/span-cost.ts ...`, summarised by
 * `bun bench/lib/cpuprofile.ts DIR/*.cpuprofile`.
 */
import { report } from "./lib/report";
import { median } from "./lib/stats";
import { parseConfig } from "../src/config/load";
import { Logger } from "../src/log/logger";
import { StatusAggregator } from "../src/status/aggregator";
import { AgentMetrics } from "../src/telemetry/metrics";
import { TaskRegistry } from "../src/telemetry/tasks";
import { EbpfCore, NATIVE_DEPS } from "../src/ebpf";
import { OtlpPipeline } from "../src/export/pipeline";
import { TransportSender } from "../src/export/sender";
import { ItemEncoder, buildRequest } from "../src/export/encode";
import type { Transport } from "../src/export/transport";
import type { SpanItem } from "../src/export/model";
import { WorkloadRegistry } from "../src/workloads";
import { ContainerDirectory } from "../src/discovery/directory";
import { NetworkCollector } from "../src/collectors/network/component";
import { decodeHttpEventReused, HTTP_EVENT_HEADER_BYTES } from "../src/collectors/network/decoders";
import type { AgentContext } from "../src/collectors/context";
import { argNumber } from "./lib/args";
import { loadavg } from "node:os";
import { gzipSync } from "node:zlib";
import { threadCpuSeconds } from "./lib/proc";
import { RedAggregator, redOptionsOf } from "../src/collectors/network/http/red";
import { ProcessLabeler } from "../src/collectors/network/labels";
import { networkOf } from "../src/collectors/network/config";
import { headEnd, parseHeadBytes, type HttpRequestHead } from "../src/collectors/network/http/parser";
import { Role } from "../src/collectors/network/red-maps";

const EXCHANGES = argNumber("exchanges", 50_000);
const ROUNDS = argNumber("rounds", 7);
const WARMUP = argNumber("warmup", 200_000);
/** Untimed whole rounds after the warm-up, until one passes without compilation (below). */
const WARMUP_ROUNDS_MAX = argNumber("warmup-rounds", 8);
/** Exchanges handled between two turns of the event loop (a ring buffer poll hands over a batch of records). */
const POLL_BATCH = 64;
const CONNECTIONS = 64;
const BATCH_SIZE = 512;
const TARGET_US = 5;

const CONFIG = `
agent:
  ebpf:
    enabled: false
    network:
      max_spans_per_second: 1000000
queues:
  traces:
    capacity: 200000
    mem_limit: 1GiB
    batch_size: ${BATCH_SIZE}
`;

let sentBytes = 0;
let sentRequests = 0;
/** A copy of the largest request handed over (the pipeline reuses its buffer), for the compression note. */
let lastFullBody: Uint8Array | undefined;
const transport: Transport = {
  async send(_signal, body) {
    sentBytes += body.length;
    sentRequests++;
    if (body.length > (lastFullBody?.length ?? 0)) lastFullBody = body.slice();
    return { kind: "success", rejected: 0, message: "" };
  },
  ready: () => true,
  close() {},
};

const config = parseConfig(CONFIG, {});
const tasks = new TaskRegistry();
const metrics = new AgentMetrics("svc", tasks);
const logger = new Logger({ sink: () => {} });
const pipeline = new OtlpPipeline({ config, metrics, logger, tasks });
pipeline.connect(new TransportSender(transport));
const base = { config, logger, status: new StatusAggregator(), metrics, tasks, env: {}, pipeline };
const ebpf = new EbpfCore(base as never, NATIVE_DEPS);
const workloads = new WorkloadRegistry(new ContainerDirectory(), { selfPid: -1 });
workloads.attachProcesses(ebpf.processes);
const ctx = { ...base, workloads, ebpf } as unknown as AgentContext;
/** The traced processes must not be taken for the agent itself. */
const collector = new NetworkCollector(ctx, ebpf, 0x7fff_fff0);

/* One request and one response record per connection, patched in place (timestamp, stream offset) before each decode. */
const REQUEST = "GET /api/items/1234?view=full&page=2 HTTP/1.1\r\nHost: shop.local:8080\r\nUser-Agent: wrk/4.2\r\nAccept: application/json\r\nTraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\r\n";
const RESPONSE = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 18\r\nDate: Wed, 25 Nov 2026 10:00:00 GMT\r\n\r\n{\"id\":1234,\"ok\":1}";
const PIDS = [process.pid, process.ppid];
const enc = new TextEncoder();
const reqBytes = enc.encode(REQUEST);
const resBytes = enc.encode(RESPONSE);
const slot = (n: number) => (HTTP_EVENT_HEADER_BYTES + n + 7) & ~7;
const reqSlot = slot(reqBytes.length);
const resSlot = slot(resBytes.length);
const ring = new DataView(new ArrayBuffer(CONNECTIONS * (reqSlot + resSlot)));
function writeRecord(at: number, sk: number, pid: number, io: number, data: Uint8Array): void {
  ring.setBigUint64(at + 8, BigInt(0xffff_8880_0000_0000) + BigInt(sk * 4096), true);
  ring.setUint32(at + 32, pid, true);
  ring.setUint32(at + 36, pid, true);
  ring.setUint32(at + 40, data.length, true);
  ring.setUint16(at + 44, data.length, true);
  ring.setUint8(at + 46, io);
  ring.setUint8(at + 47, 2);
  ring.setUint16(at + 48, 8080, true);
  ring.setUint16(at + 50, 40_000 + sk, true);
  ring.setUint16(at + 52, 2, true);
  [10, 0, 0, 1].forEach((x, i) => ring.setUint8(at + 56 + i, x));
  [10, 0, 0, 2 + (sk % 200)].forEach((x, i) => ring.setUint8(at + 72 + i, x));
  [..."shop-server"].forEach((c, i) => ring.setUint8(at + 88 + i, c.charCodeAt(0)));
  new Uint8Array(ring.buffer, at + HTTP_EVENT_HEADER_BYTES, data.length).set(data);
}
const reqAt = (c: number) => c * (reqSlot + resSlot);
const resAt = (c: number) => reqAt(c) + reqSlot;
for (let c = 0; c < CONNECTIONS; c++) {
  writeRecord(reqAt(c), c, PIDS[c % PIDS.length]!, 0, reqBytes);
  writeRecord(resAt(c), c, PIDS[c % PIDS.length]!, 1, resBytes);
}
const offsets = new Float64Array(CONNECTIONS * 2);
let clock = BigInt(Math.round(performance.now() * 1e6));

function setOffset(at: number, off: number): void {
  ring.setUint32(at + 16, off % 2 ** 32, true);
  ring.setUint32(at + 20, Math.floor(off / 2 ** 32), true);
}

/** Where the path is cut: after decoding, after span building, after encoding, or not at all. */
type Cut = "decode" | "build" | "encode" | "full";
let cut: Cut = "full";
let decodedBytes = 0;

/** Feeds `n` exchanges (two records each) through the collector, a poll batch at a time, then flushes the pipeline. */
async function feed(n: number): Promise<void> {
  const decodeOnly = cut === "decode";
  for (let i = 0; i < n; i++) {
    const c = i % CONNECTIONS;
    const rq = reqAt(c);
    const rs = resAt(c);
    ring.setBigUint64(rq, (clock += 20_000n), true);
    setOffset(rq, offsets[2 * c]!);
    offsets[2 * c]! += reqBytes.length;
    const request = decodeHttpEventReused(ring, rq, reqSlot);
    if (decodeOnly) decodedBytes += request.data.length;
    else collector.handle(request);
    ring.setBigUint64(rs, (clock += 80_000n), true);
    setOffset(rs, offsets[2 * c + 1]!);
    offsets[2 * c + 1]! += resBytes.length;
    const response = decodeHttpEventReused(ring, rs, resSlot);
    if (decodeOnly) decodedBytes += response.data.length;
    else collector.handle(response);
    if (i % POLL_BATCH === POLL_BATCH - 1) await Promise.resolve();
  }
  await Promise.resolve();
  await pipeline.flush(30_000);
}

/** The reference: `n` encodes of `span` by the pipeline's encoder, assembled into requests of BATCH_SIZE. */
function bareEncodes(n: number, span: SpanItem): number {
  const encoder = new ItemEncoder(pipeline.resource.encoder);
  let bytes = 0;
  let batch = [];
  for (let i = 0; i < n; i++) {
    batch.push(encoder.encode("traces", span));
    if (batch.length === BATCH_SIZE || i === n - 1) {
      bytes += buildRequest("traces", batch, pipeline.resource.encoder).length;
      batch = [];
    }
  }
  return bytes;
}

/**
 * A fixed loop of integer arithmetic on registers (no memory traffic): its CPU time tells whether the core itself ran
 * slower in a round. On this VM the rounds of memory-heavy code (the path, the reference) slow down by up to 2x in
 * some spells while this loop does not: the host's other work competes for caches and memory, not for the core.
 */
const SPIN_STEPS = 20_000_000;
function spin(n: number): number {
  let x = 1;
  for (let i = 0; i < n; i++) x = (Math.imul(x, 1103515245) + 12345) | 0;
  return x;
}

function userUs(fn: () => void): number;
function userUs(fn: () => Promise<void>): Promise<number>;
function userUs(fn: () => void | Promise<void>): number | Promise<number> {
  const c0 = process.cpuUsage();
  const r = fn();
  if (r instanceof Promise) return r.then(() => process.cpuUsage(c0).user);
  return process.cpuUsage(c0).user;
}

let sample: SpanItem | undefined;
function plainSpan(s: SpanItem): SpanItem {
  const { traceId, spanId, name, kind, startTimeUnixNano, endTimeUnixNano, attributes, status, scope, resource } = s;
  return { traceId, spanId, name, kind, startTimeUnixNano, endTimeUnixNano, attributes: { ...attributes }, status, scope, resource };
}
const submit = pipeline.submit.bind(pipeline);
const stageEncoder = new ItemEncoder(pipeline.resource.encoder);
let stageBytes = 0;
let stageSpans = 0;
pipeline.submit = (signal, items) => {
  /* The reference encodes a plain span object with the same fields and attributes (the path's spans write theirs from the exchange). */
  if (signal === "traces" && !sample) sample = plainSpan(items[0] as SpanItem);
  if (signal !== "traces" || cut === "full") return submit(signal, items);
  stageSpans += items.length;
  if (cut === "encode") for (const item of items) stageBytes += stageEncoder.encode("traces", item).bytes.length;
  return items.length;
};

/** User us per exchange of `n` exchanges through the path cut at `at`. */
async function stageUs(at: Cut, n: number): Promise<number> {
  cut = at;
  stageSpans = 0;
  decodedBytes = 0;
  stageBytes = 0;
  try {
    const us = (await userUs(() => feed(n))) / n;
    const did = at === "decode" ? decodedBytes === n * (reqBytes.length + resBytes.length) : stageSpans === n && (at === "build" || stageBytes > 0);
    if (!did) throw new Error(`stage ${at}: ${at === "decode" ? `${decodedBytes} bytes decoded` : `${stageSpans} spans of ${n} exchanges`}`);
    return us;
  } finally {
    cut = "full";
  }
}
const PATH_OF = (() => {
  /* The request's path, cut from its start line as the parser cuts it. */
  const line = REQUEST.slice(0, REQUEST.indexOf(" HTTP/"));
  return { line, from: line.indexOf(" ") + 1, to: line.indexOf("?") };
})();
/* The exemplar step, with the RED aggregator the network component builds from the same configuration. */
const net = networkOf(config);
const labeler = new ProcessLabeler(ebpf.processes, workloads);
const red = new RedAggregator(
  redOptionsOf(net, {
    describe: (pid) => labeler.describe(pid, ""),
    /* The kernel's path hash 1 is the request's path. */
    path: (hash) => (hash === 1n ? { path: PATH_OF.line.slice(PATH_OF.from, PATH_OF.to), truncated: false } : undefined),
  }),
);
red.add(PIDS.map((pid) => ({ key: { pathHash: 1n, pid, status: 200, method: "GET", role: Role.SERVER, peer: "10.0.0.2", peerPort: 8080 }, count: 1, sumNs: 100_000, buckets: [1] })));
/**
 * User us per exchange of `n` exemplars kept as the component keeps them, each with the request's path as the parser
 * hands it over: for a target it has seen, the string it kept (one object; http/parser.ts keeps targets and paths).
 */
function exemplarUs(n: number): number {
  const path = (parseHeadBytes(reqBytes, 0, headEnd(reqBytes, 0))!.head as HttpRequestHead).path!;
  if (path !== PATH_OF.line.slice(PATH_OF.from, PATH_OF.to)) throw new Error(`the parser's path ${path} is not the request's`);
  return userUs(() => {
    for (let i = 0; i < n; i++) {
      /* The exemplar as the component makes it: the span's end time, its duration in seconds, its ids. */
      const s = sample!;
      red.exemplar({ pid: PIDS[i % PIDS.length]!, role: Role.SERVER, method: "GET", status: 200, path, peerPort: 8080 }, { timeUnixNano: s.endTimeUnixNano, value: Number(s.endTimeUnixNano - s.startTimeUnixNano) / 1e9, traceId: s.traceId, spanId: s.spanId });
    }
  }) / n;
}

const STAGES = ["decode", "build", "encode"] as const;
const stageNames: Record<(typeof STAGES)[number], string> = { decode: "decode 2 records", build: "+ pair, parse, build span", encode: "+ encode" };
const stages: Record<(typeof STAGES)[number], number[]> = { decode: [], build: [], encode: [] };

const jitSeconds = () => threadCpuSeconds(process.pid, "JITWorker");
const warmupJit0 = jitSeconds();
const warmupUs = (await userUs(() => feed(WARMUP))) / WARMUP;
const warmupJitUs = ((jitSeconds() - warmupJit0) * 1e6) / WARMUP;
if (!sample) throw new Error("no span reached the pipeline");
bareEncodes(WARMUP, sample);
spin(SPIN_STEPS);
for (const at of STAGES) await stageUs(at, WARMUP);
exemplarUs(WARMUP);
const agentUs: number[] = [];
const refUs: number[] = [];
const spinMs: number[] = [];
const sysUs: number[] = [];
const jitUs: number[] = [];
const exemplarRounds: number[] = [];
/** One round: the whole path, the reference, the core's speed, the stages and the exemplar step; recorded or not. */
async function round(r: number, record: boolean): Promise<void> {
  const before = pipeline.accounting().traces.exported;
  const s0 = process.cpuUsage().system;
  const j0 = jitSeconds();
  const path = (await userUs(() => feed(EXCHANGES))) / EXCHANGES;
  const jit = ((jitSeconds() - j0) * 1e6) / EXCHANGES;
  const sys = (process.cpuUsage().system - s0) / EXCHANGES;
  const exported = pipeline.accounting().traces.exported - before;
  if (exported !== EXCHANGES) throw new Error(`round ${r}: ${exported} spans exported of ${EXCHANGES} exchanges (dropped ${pipeline.accounting().traces.droppedTotal})`);
  const refRound = userUs(() => void bareEncodes(EXCHANGES, sample!)) / EXCHANGES;
  const spinRound = userUs(() => void spin(SPIN_STEPS)) / 1000;
  const stageRound: number[] = [];
  for (const at of STAGES) stageRound.push(await stageUs(at, EXCHANGES));
  const exemplarRound = exemplarUs(EXCHANGES);
  if (!record) return;
  agentUs.push(path);
  jitUs.push(jit);
  sysUs.push(sys);
  refUs.push(refRound);
  spinMs.push(spinRound);
  STAGES.forEach((at, i) => stages[at].push(stageRound[i]!));
  exemplarRounds.push(exemplarRound);
}
/*
 * Whole rounds, unrecorded, until one passes without CPU on JSC's compiler threads (up to WARMUP_ROUNDS_MAX): after
 * the warm-up above they still compiled 11-36 ms in each of the next four rounds (the FTL tier of the tracker's push,
 * the request writer, the RED counters), code the path runs only every batch of 512, or the rounds' other steps.
 */
let warmupRounds = 0;
let warmupRoundsJitMs = 0;
while (warmupRounds < WARMUP_ROUNDS_MAX) {
  const j0 = jitSeconds();
  await round(-1 - warmupRounds, false);
  warmupRounds++;
  const ms = (jitSeconds() - j0) * 1000;
  warmupRoundsJitMs += ms;
  if (ms === 0) break;
}
for (let r = 0; r < ROUNDS; r++) await round(r, true);
await pipeline.shutdown(AbortSignal.timeout(5000));
/* Not in the figure: what the default transport does to each request next (otlp.compression gzip). */
const level = config.otlp.compression_level;
const gzipRounds: number[] = [];
const GZIPS = 20;
const spansPerBody = lastFullBody!.length / (sentBytes / sentRequests / BATCH_SIZE);
for (let r = 0; r < 5; r++)
  gzipRounds.push(
    userUs(() => {
      for (let i = 0; i < GZIPS; i++) gzipSync(lastFullBody!, { level });
    }) / (GZIPS * spansPerBody),
  );
/* The figure: the path and the exemplar step of the same round, as the default agent does both per span. */
const totalUs = agentUs.map((x, r) => x + exemplarRounds[r]!);
const a = median(totalUs);
const pathUs = median(agentUs);
const ref = median(refUs);
const stageMedians = STAGES.map((at) => median(stages[at]));
const stageText = STAGES.map((at, i) => `${stageNames[at]} ${stageMedians[i]!.toFixed(2)} (${(stageMedians[i]! - (i > 0 ? stageMedians[i - 1]! : 0)).toFixed(2)})`).join("; ");
report({
  bench: "span-cost: user-space CPU per HTTP exchange, kernel records to OTLP bytes at the transport",
  rows: [
    { name: "user CPU per HTTP/1.1 exchange: decode 2 records, pair, build span, encode, batch, RED exemplar (median of rounds)", agent: a, reference: ref, referenceName: "bare encode + request assembly of the same span", unit: "us", target: `<= ${TARGET_US}`, met: a <= TARGET_US },
  ],
  notes: [
    `${ROUNDS} rounds of ${EXCHANGES.toLocaleString("en-US")} exchanges after ${WARMUP.toLocaleString("en-US")} of warm-up, ${CONNECTIONS} keep-alive connections, ${POLL_BATCH} exchanges per event-loop turn, batch_size ${BATCH_SIZE}`,
    `warm-up: ${warmupUs.toFixed(2)} us per exchange, of which JSC's compiler threads ${warmupJitUs.toFixed(2)} (CPU read from /proc in clock ticks of 10 ms); then ${warmupRounds} untimed whole round(s) until one passed without compilation (at most ${WARMUP_ROUNDS_MAX}; compiler threads ${warmupRoundsJitMs.toFixed(0)} ms in them); during the rounds the compiler threads took ${median(jitUs).toFixed(2)} us per exchange (median; included in the figure)`,
    `per round, us per exchange: path + exemplar ${totalUs.map((x) => x.toFixed(2)).join(", ")}; path ${agentUs.map((x) => x.toFixed(2)).join(", ")}; reference ${refUs.map((x) => x.toFixed(2)).join(", ")}; system time of the path ${median(sysUs).toFixed(2)} us (median)`,
    `per round, ms of CPU for ${SPIN_STEPS.toLocaleString("en-US")} steps of register-only integer arithmetic (the core's own speed; memory-heavy code slows in this VM's spells while it does not): ${spinMs.map((x) => x.toFixed(1)).join(", ")}`,
    `stages, cumulative us per exchange (the stage's own in parentheses), medians: ${stageText}; + queue, batch, request assembly = the path ${pathUs.toFixed(2)} (${(pathUs - stageMedians[2]!).toFixed(2)}); the RED exemplar step apart ${median(exemplarRounds).toFixed(2)}`,
    `not in the figure: the default transport's gzip (otlp.compression_level ${level}) of a ${lastFullBody?.length.toLocaleString("en-US")}-byte request, ${median(gzipRounds).toFixed(2)} us per span (median of 5 samples of ${GZIPS}, synchronous zlib); bench/export.ts measures whole requests through the gRPC and HTTP transports`,
    `load average while it ran (1, 5, 15 min): ${loadavg().map((x) => x.toFixed(2)).join(", ")}`,
    `handed to the transport: ${sentRequests} requests, ${(sentBytes / sentRequests / BATCH_SIZE).toFixed(0)} bytes per span on average`,
  ],
});
process.exit(0);
