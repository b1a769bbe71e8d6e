/** A configuration problem, always named by its dotted key path. */
export interface ConfigProblem {
  /** Dotted key path, e.g. `self_telemetry.auth.bearer_token`; "" for the whole document. */
  path: string;
  /** What is wrong, in words an operator can act on. */
  message: string;
  /** Line (1-based) in the file of the key or value the problem is about; absent when the file does not have it. */
  line?: number;
  /** Column (1-based) on that line. */
  column?: number;
  /** The environment variable the problem's value came from (an SVC_* override), instead of a place in the file. */
  variable?: string;
}

/** One problem as a line of text: `path: message (line L, column C)`. */
export function formatProblem(p: ConfigProblem): string {
  const where = p.line !== undefined ? ` (line ${p.line}, column ${p.column ?? 1})` : p.variable ? ` (from ${p.variable})` : "";
  return `${p.path || "(document)"}: ${p.message}${where}`;
}

/** Thrown when a configuration cannot be used; carries every problem found, not only the first. */
export class ConfigError extends Error {
  readonly problems: ConfigProblem[];
  constructor(problems: ConfigProblem[], source?: string) {
    const where = source ? ` in ${source}` : "";
    super(
      `invalid configuration${where}:\n` + problems.map((p) => `  ${formatProblem(p)}`).join("\n"),
    );
    this.name = "ConfigError";
    this.problems = problems;
  }
}
