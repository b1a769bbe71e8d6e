/**
 * The one output convention of the benchmarks: a human table on stdout, plus one machine-readable line
 * `BENCH-RESULT <json>` that bench/run.ts collects into BENCHMARKS.md.
 */
export interface BenchRow {
  /** What was measured, e.g. "GET /healthz requests/s". */
  name: string;
  /** The agent's figure. */
  agent: number;
  /** The reference measured in the same run (undefined when there is none). */
  reference?: number;
  /** What the reference is, e.g. "raw Bun.serve, same bytes". */
  referenceName?: string;
  unit: string;
  /** The target in words, e.g. ">= 80% of raw". */
  target?: string;
  /** Whether the target was met (undefined when there is no target). */
  met?: boolean;
}

export interface BenchResult {
  bench: string;
  rows: BenchRow[];
  notes?: string[];
}

function fmt(n: number | undefined): string {
  if (n === undefined) return "-";
  if (Math.abs(n) >= 1000) return Math.round(n).toLocaleString("en-US");
  return Number(n.toPrecision(3)).toString();
}

/** Prints the table and the machine-readable line. */
export function report(result: BenchResult): void {
  console.log(`\n${result.bench}`);
  console.log("| measure | agent | reference | ratio | target | met |");
  console.log("|---|---|---|---|---|---|");
  for (const r of result.rows) {
    const ratio = r.reference ? `${(r.agent / r.reference).toFixed(2)}` : "-";
    console.log(
      `| ${r.name} (${r.unit}) | ${fmt(r.agent)} | ${fmt(r.reference)}${r.referenceName ? ` (${r.referenceName})` : ""} | ${ratio} | ${r.target ?? "-"} | ${r.met === undefined ? "-" : r.met ? "yes" : "NO"} |`,
    );
  }
  for (const n of result.notes ?? []) console.log(`note: ${n}`);
  console.log(`BENCH-RESULT ${JSON.stringify(result)}`);
}
