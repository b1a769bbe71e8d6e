/** Small statistics the benchmarks share. */

/**
 * The value at fraction `f` (0..1) of `xs` sorted ascending: index floor(f * n), the last one for f = 1. `xs` is not
 * reordered.
 */
export function quantile(xs: readonly number[], f: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(f * s.length))]!;
}

/**
 * The median of `xs`: the middle value, or the mean of the two middle values for an even count (the upper one alone
 * would favour ratios judged against a ">=" target); `xs` is not reordered.
 */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 === 1 ? s[(n - 1) / 2]! : (s[n / 2 - 1]! + s[n / 2]!) / 2;
}

/** The arithmetic mean of `xs`. */
export function mean(xs: readonly number[]): number {
  return xs.reduce((a, b) => a + b, 0) / xs.length;
}

/**
 * Percentile bootstrap interval of `statistic` over `xs`: the statistic of `resamples` samples drawn from `xs` with
 * replacement, and their quantiles at (1 - level) / 2 and (1 + level) / 2. The draws come from a fixed-seed generator,
 * so the same figures give the same interval.
 */
export function bootstrapInterval(xs: readonly number[], statistic: (sample: readonly number[]) => number, level = 0.9, resamples = 2000): [number, number] {
  let seed = 0x9e3779b9;
  const next = () => {
    // xorshift32
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) / 0x1_0000_0000;
  };
  const stats: number[] = [];
  const sample = new Array<number>(xs.length);
  for (let r = 0; r < resamples; r++) {
    for (let i = 0; i < xs.length; i++) sample[i] = xs[Math.floor(next() * xs.length)]!;
    stats.push(statistic(sample));
  }
  return [quantile(stats, (1 - level) / 2), quantile(stats, (1 + level) / 2)];
}
