/** Command-line parsing: a command word, then flags. Unknown flags are errors, never ignored. */

export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

export interface FlagSpec {
  /** Takes a value (`--config PATH` or `--config=PATH`). */
  value?: boolean;
}

export interface ParsedArgs {
  flags: Record<string, string | true>;
  positionals: string[];
}

/** Parses `argv` against `spec`; `--help`/`-h` is always accepted. */
export function parseFlags(argv: string[], spec: Record<string, FlagSpec>): ParsedArgs {
  const flags: Record<string, string | true> = {};
  const positionals: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "-h" || arg === "--help") {
      flags.help = true;
      continue;
    }
    if (!arg.startsWith("--")) {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf("=");
    const name = arg.slice(2, eq === -1 ? undefined : eq);
    const s = spec[name];
    if (!s) throw new UsageError(`unknown option --${name}`);
    if (s.value) {
      const v = eq !== -1 ? arg.slice(eq + 1) : argv[++i];
      if (v === undefined || v === "") throw new UsageError(`--${name} needs a value`);
      flags[name] = v;
    } else {
      if (eq !== -1) throw new UsageError(`--${name} takes no value`);
      flags[name] = true;
    }
  }
  return { flags, positionals };
}
