/** A configuration problem, always named by its dotted key path. */
export interface ConfigProblem {
  /** Dotted key path, e.g. `self_telemetry.auth.bearer_token`; "" for the whole document. */
  path: string;
  /** What is wrong, in words an operator can act on. */
  message: string;
}

/** Thrown when a configuration cannot be used; carries every problem found, not only the first. */
export class ConfigError extends Error {
  readonly problems: ConfigProblem[];
  constructor(problems: ConfigProblem[], source?: string) {
    const where = source ? ` in ${source}` : "";
    super(
      `invalid configuration${where}:\n` + problems.map((p) => `  ${p.path || "(document)"}: ${p.message}`).join("\n"),
    );
    this.name = "ConfigError";
    this.problems = problems;
  }
}
