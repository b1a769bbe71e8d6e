/** Small statistics the benchmarks share. */

/**
 * The value at fraction `f` (0..1) of `xs` sorted ascending: index floor(f * n), the last one for f = 1. `xs` is not
 * reordered.
 */
export function quantile(xs: readonly number[], f: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(f * s.length))]!;
}

/** The median of `xs` (the upper one of the two middle values for an even count); `xs` is not reordered. */
export function median(xs: readonly number[]): number {
  return quantile(xs, 0.5);
}
