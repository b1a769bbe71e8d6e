/** The problems a configuration text is refused with (fails the test when it is accepted). */
import { ConfigError, parseConfig } from "../../src/config";
import type { ConfigProblem } from "../../src/config/problems";

export function problemsOf(text: string, env: Record<string, string> = {}): ConfigProblem[] {
  try {
    parseConfig(text, env);
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
  throw new Error("expected the configuration to be refused");
}
