/** The benchmarks' command-line options, each written `--name value`. */

/** The value after `--name`, else `fallback`. */
export function argText(name: string): string | undefined;
export function argText(name: string, fallback: string): string;
export function argText(name: string, fallback?: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

/** The number after `--name`, else `fallback`; a value that is not a number stops the benchmark, naming the option. */
export function argNumber(name: string, fallback: number): number {
  const text = argText(name);
  if (text === undefined) return fallback;
  const n = Number(text);
  if (text.trim() === "" || !Number.isFinite(n)) throw new Error(`--${name}: expected a number, got ${JSON.stringify(text)}`);
  return n;
}
