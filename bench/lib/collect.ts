/**
 * What bench/run.ts reads from a benchmark's output: its `BENCH-RESULT <json>` lines, or, for a benchmark
 * that prints only its own table, the figures parsed from that table (adapters keyed by file name).
 */
import type { BenchResultWithCurves } from "./curves";
import type { BenchRow } from "./report";

export const RESULT_PREFIX = "BENCH-RESULT ";

/** Every BENCH-RESULT line of `output`, parsed; lines that are not valid JSON are reported in `errors`. */
export function parseResults(output: string): { results: BenchResultWithCurves[]; errors: string[] } {
  const results: BenchResultWithCurves[] = [];
  const errors: string[] = [];
  for (const line of output.split("\n")) {
    const i = line.indexOf(RESULT_PREFIX);
    if (i !== 0) continue;
    try {
      const r = JSON.parse(line.slice(RESULT_PREFIX.length)) as BenchResultWithCurves;
      if (typeof r.bench !== "string" || !Array.isArray(r.rows)) throw new Error("no bench or rows");
      results.push(r);
    } catch (e) {
      errors.push(`unreadable BENCH-RESULT line: ${(e as Error).message}`);
    }
  }
  return { results, errors };
}

const EXPORT_TARGET_RATIO = 3;
const EXPORT_TARGET_SPANS_PER_S = 100_000;

/**
 * bench/export.ts prints `median svc-agent <spans> <spans/s> <CPU us/span> ...` and the same for
 * `median OTel JS SDK` (later columns vary); targets from its issue: >= 3x the SDK's spans/s and >= 100,000
 * spans/s with gzip.
 */
function exportAdapter(output: string): BenchResultWithCurves | undefined {
  const line = (label: string) => {
    const m = new RegExp(`^${label}\\s+(\\d+)\\s+([\\d.]+)\\s+([\\d.]+)`, "m").exec(output);
    return m ? { spans: Number(m[1]), rate: Number(m[2]), cpuUs: Number(m[3]) } : undefined;
  };
  const a = line("median svc-agent");
  const s = line("median OTel JS SDK");
  if (!a) return undefined;
  const header = /^export benchmark: (.*)$/m.exec(output)?.[1];
  const rows: BenchRow[] = [
    {
      name: "spans exported",
      agent: a.rate,
      reference: s?.rate,
      referenceName: s ? "OTel JS SDK BatchSpanProcessor + OTLP gRPC exporter" : undefined,
      unit: "spans/s",
      target: `>= ${EXPORT_TARGET_RATIO}x the SDK`,
      met: s ? a.rate >= EXPORT_TARGET_RATIO * s.rate : undefined,
    },
    { name: "spans exported, absolute", agent: a.rate, unit: "spans/s", target: `>= ${EXPORT_TARGET_SPANS_PER_S.toLocaleString("en-US")} spans/s`, met: a.rate >= EXPORT_TARGET_SPANS_PER_S },
    { name: "CPU per span", agent: a.cpuUs, reference: s?.cpuUs, referenceName: s ? "OTel JS SDK" : undefined, unit: "us" },
  ];
  return {
    bench: "export: svc-agent pipeline vs OpenTelemetry JS SDK (OTLP/gRPC to one local receiver)",
    rows,
    notes: [`parsed by bench/run.ts from the benchmark's own table (it prints no BENCH-RESULT line)${header ? `; ${header}` : ""}`],
  };
}

const ADAPTERS: Record<string, (output: string) => BenchResultWithCurves | undefined> = {
  export: exportAdapter,
};

/** The results of one benchmark: its BENCH-RESULT lines, else its adapter's parse of its own table. */
export function collect(name: string, output: string): { results: BenchResultWithCurves[]; errors: string[]; adapted: boolean } {
  const parsed = parseResults(output);
  if (parsed.results.length) return { ...parsed, adapted: false };
  const adapted = ADAPTERS[name]?.(output);
  return adapted ? { results: [adapted], errors: parsed.errors, adapted: true } : { ...parsed, adapted: false };
}
