/**
 * Subcommands other than run / validate-config / version: each a name, its flags, its help and its action.
 * Each command lives beside this file (receive.ts, diagnostics.ts) and calls into its subsystem.
 */
import type { FlagSpec, ParsedArgs } from "./args";
import { diagnosticsCommand, DIAGNOSTICS_HELP } from "./diagnostics";
import { RECEIVE_HELP, receiveCommand } from "./receive";

export interface Command {
  help: string;
  flags: Record<string, FlagSpec>;
  /** Runs the command; resolves with the exit code. */
  run(args: ParsedArgs, env: Record<string, string | undefined>): Promise<number> | number;
}

export const COMMANDS: Record<string, Command> = {
  receive: { help: RECEIVE_HELP, flags: { listen: { value: true }, output: { value: true } }, run: (args) => receiveCommand(args) },
  diagnostics: {
    help: DIAGNOSTICS_HELP,
    flags: { config: { value: true }, output: { value: true } },
    run: diagnosticsCommand,
  },
};
