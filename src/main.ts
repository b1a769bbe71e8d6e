/**
 * svc-agent entry point: dispatches the command line. The only place that calls process.exit.
 */
import { parseFlags, UsageError } from "./cli/args";
import { EXIT } from "./cli/exit";
import { MAIN_HELP, RUN_HELP, VALIDATE_HELP, VERSION_HELP } from "./cli/help";
import { runCommand } from "./cli/run";
import { validateCommand } from "./cli/validate";
import { COMMANDS } from "./cli/commands";
import { configReferenceMarkdown } from "./config/reference";
import { otelVariablesMarkdown } from "./config/env";
import { versionText } from "./version";

async function main(argv: string[]): Promise<number> {
  const env = process.env;
  const first = argv[0];
  if (first === "--version" || first === "version") {
    if (argv.includes("--help") || argv.includes("-h")) return print(VERSION_HELP);
    return print(versionText());
  }
  if (first === "help") {
    const topics: Record<string, () => string> = {
      help: () => MAIN_HELP,
      run: () => RUN_HELP,
      "validate-config": () => VALIDATE_HELP,
      version: () => VERSION_HELP,
      ...Object.fromEntries(Object.entries(COMMANDS).map(([name, c]) => [name, () => c.help])),
      config: () => `${configReferenceMarkdown()}\n${otelVariablesMarkdown()}`,
    };
    const topic = argv[1];
    if (topic === undefined || topic === "--help" || topic === "-h") return print(MAIN_HELP);
    if (argv.length > 2) throw new UsageError(`help takes one topic, got ${argv.length - 1}`);
    const text = Object.hasOwn(topics, topic) ? topics[topic]!() : undefined;
    if (text === undefined) throw new UsageError(`no help topic ${JSON.stringify(topic)}; topics: ${Object.keys(topics).join(", ")}`);
    return print(text);
  }
  if (first === "--validate-config" || first === "validate-config") {
    const { flags, positionals } = parseFlags(argv.slice(1), {});
    if (flags.help) return print(VALIDATE_HELP);
    const path = positionals[0];
    if (!path || positionals.length > 1) throw new UsageError("--validate-config takes exactly one file path");
    return validateCommand(path, env);
  }
  if (first && COMMANDS[first]) {
    const command = COMMANDS[first];
    const parsed = parseFlags(argv.slice(1), command.flags);
    if (parsed.flags.help) return print(command.help);
    return command.run(parsed, env);
  }
  const rest = first === "run" ? argv.slice(1) : argv;
  if (rest[0] === "--help" || rest[0] === "-h") return print(first === "run" ? RUN_HELP : MAIN_HELP);
  if (rest[0] !== undefined && !rest[0].startsWith("-")) throw new UsageError(`unknown command ${JSON.stringify(rest[0])}`);
  const { flags, positionals } = parseFlags(rest, { config: { value: true }, debug: {} });
  if (flags.help) return print(RUN_HELP);
  if (positionals.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`);
  return runCommand({
    configPath: typeof flags.config === "string" ? flags.config : undefined,
    debug: flags.debug === true,
    env,
  });
}

function print(text: string): number {
  process.stdout.write(text);
  return EXIT.OK;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e) => {
    if (e instanceof UsageError) {
      process.stderr.write(`svc-agent: ${e.message}\nRun 'svc-agent help' for usage.\n`);
      process.exit(EXIT.CONFIG);
    }
    process.stderr.write(`svc-agent: fatal: ${(e as Error).stack ?? String(e)}\n`);
    process.exit(EXIT.RUNTIME);
  },
);
