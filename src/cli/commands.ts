/**
 * Subcommands other than run / validate-config / version: each a name, its flags, its help and its action.
 * A subsystem that brings a command (receive, diagnostics) registers it here.
 */
import type { FlagSpec, ParsedArgs } from "./args";
import { EXIT } from "./exit";
import { RECEIVE_HELP, receiveCommand } from "../export/receiver";

export interface Command {
  help: string;
  flags: Record<string, FlagSpec>;
  /** Runs the command; resolves with the exit code. */
  run(args: ParsedArgs, env: Record<string, string | undefined>): Promise<number> | number;
}

export const COMMANDS: Record<string, Command> = {
  receive: { help: RECEIVE_HELP, flags: { listen: { value: true }, output: { value: true } }, run: (args) => receiveCommand(args) },
  diagnostics: {
    help: `Usage: svc-agent diagnostics [--config PATH] [--output FILE]

Writes a diagnostics bundle (tar.gz) to standard output or FILE: sanitized configuration, metrics,
eBPF programs and maps, kernel info, recent logs, status answers, and a manifest.
Not available in this build yet: it exits 1 and says so.
`,
    flags: { config: { value: true }, output: { value: true } },
    run() {
      process.stderr.write("svc-agent diagnostics: not available in this build yet\n");
      return EXIT.RUNTIME;
    },
  },
};
