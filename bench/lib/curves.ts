/**
 * Curves in a benchmark's result: a BENCH-RESULT line may carry `curves` (x values and one y series per
 * measured thing); bench/run.ts prints them as tables and renders each as a PNG chart in the report.
 */
import type { BenchResult } from "./report";
import type { Chart } from "./png-chart";

export interface Curve extends Chart {
  /** File-name stem of the chart, e.g. "scaling-metrics". */
  id: string;
  /** Unit of the y values, for the table. */
  unit: string;
}

export interface BenchResultWithCurves extends BenchResult {
  curves?: Curve[];
}

/** Mean milliseconds per call of `fn` (one warm-up call; at least `minIterations` calls and `minMs`). */
export async function meanMs(fn: () => unknown, minIterations = 5, minMs = 300): Promise<number> {
  await fn();
  let n = 0;
  const start = performance.now();
  while (n < minIterations || performance.now() - start < minMs) {
    await fn();
    n++;
  }
  return (performance.now() - start) / n;
}

