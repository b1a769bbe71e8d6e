/**
 * Log collection throughput: the compiled agent tails one file of CRI lines written before it starts and
 * exports every line over OTLP/gRPC to a receiver in this process. Figures: lines/s from the agent's start
 * until the receiver holds every line, and lines per CPU-second of the agent (the one-core figure: the
 * agent's tail, parse and export run on one JavaScript thread). Reference in the same run: a bare Bun loop
 * that only reads the same file and splits it into lines (no parsing, no records, no export).
 *   bun run build && bun bench/logs.ts [lines]
 */
import { closeSync, mkdtempSync, openSync, readSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { OtlpReceiver } from "../src/export/receiver";
import { startAgent } from "./lib/agent";
import { report } from "./lib/report";
import { cpuSeconds } from "./lib/proc";
import { quietConfig } from "../test/helpers/quiet-config";

const LINES = Number(process.argv[2] ?? 1_000_000);
const TARGET_LINES_PER_S = 50_000;
const TIMEOUT_MS = 300_000;

function bareReadSplit(path: string): { lines: number; seconds: number } {
  const started = performance.now();
  const fd = openSync(path, "r");
  const buf = Buffer.allocUnsafe(256 * 1024);
  let lines = 0;
  let pos = 0;
  for (;;) {
    const n = readSync(fd, buf, 0, buf.length, pos);
    if (n <= 0) break;
    pos += n;
    for (let i = buf.indexOf(10); i !== -1 && i < n; i = buf.indexOf(10, i + 1)) lines++;
  }
  closeSync(fd);
  return { lines, seconds: (performance.now() - started) / 1000 };
}

const dir = mkdtempSync(join(tmpdir(), "svc-bench-logs-"));
const file = join(dir, "app.log");
const parts: string[] = [];
for (let i = 0; i < LINES; i++) parts.push(`2026-01-02T03:04:05.123456789Z stdout F GET /api/items/${i} 200 1234 bytes in 5.2 ms from 10.0.0.${i % 250}\n`);
writeFileSync(file, parts.join(""));
const bytes = Buffer.byteLength(parts.join(""));

let received = 0;
let firstAt = 0;
const rx = new OtlpReceiver({
  listen: "127.0.0.1:0",
  onRequest: (r) => {
    if (r.signal !== "logs") return;
    if (received === 0) firstAt = performance.now();
    received += r.items;
  },
});
const port = await rx.start();

const yaml = quietConfig({
  endpoint: `127.0.0.1:${port}`,
  agent: `  logs:\n    enabled: true\n    include: ["${dir}/*.log"]\n    checkpoint_file: ${dir}/state/checkpoint.json`,
});
const started = performance.now();
const agent = await startAgent(yaml);
const cpuAtStart = cpuSeconds(agent.pid);
const deadline = started + TIMEOUT_MS;
while (received < LINES && performance.now() < deadline) await Bun.sleep(5);
const elapsedS = (performance.now() - started) / 1000;
const agentCpuS = cpuSeconds(agent.pid) - cpuAtStart;
await agent.stop();
await rx.stop();
const bare = bareReadSplit(file);
rmSync(dir, { recursive: true, force: true });

const linesPerS = received / elapsedS;
const linesPerCpuS = received / agentCpuS;
report({
  bench: `bench/logs.ts: ${LINES.toLocaleString("en-US")} CRI lines (${(bytes / 2 ** 20).toFixed(1)} MiB) tailed, parsed and exported over OTLP/gRPC (gzip)`,
  rows: [
    { name: "lines/s, agent start to last line received", agent: linesPerS, unit: "lines/s", target: `>= ${TARGET_LINES_PER_S.toLocaleString("en-US")}`, met: linesPerS >= TARGET_LINES_PER_S },
    {
      name: "lines per CPU-second of the agent (one core)",
      agent: linesPerCpuS,
      reference: bare.lines / bare.seconds,
      referenceName: "bare Bun read + split of the same file, no parse/export",
      unit: "lines/CPU-s",
      target: `>= ${TARGET_LINES_PER_S.toLocaleString("en-US")}`,
      met: linesPerCpuS >= TARGET_LINES_PER_S,
    },
    { name: "agent CPU utilisation during the run", agent: (agentCpuS / elapsedS) * 100, unit: "% of one core" },
    { name: "lines received", agent: received, reference: LINES, referenceName: "lines written", unit: "lines" },
  ],
  notes: [`first export after ${((firstAt - started) / 1000).toFixed(2)} s (includes agent start-up)`, `elapsed ${elapsedS.toFixed(2)} s, agent CPU ${agentCpuS.toFixed(2)} s`],
});
