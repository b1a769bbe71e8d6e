/** `svc-agent --validate-config PATH`: checks a file, starts nothing. */
import { loadConfig } from "../config/load";
import { ConfigError } from "../config/problems";
import { EXIT } from "./exit";

export function validateCommand(path: string, env: Record<string, string | undefined>): number {
  try {
    const { config } = loadConfig(path, env);
    const enabled = [
      config.self_telemetry.enabled && `http ${config.self_telemetry.listen}`,
      config.agent.ebpf.enabled && "ebpf",
      config.agent.profiling.enabled && "profiling",
      config.agent.gpu.enabled && "gpu",
    ].filter(Boolean);
    process.stdout.write(`${path}: valid (mode ${config.mode}, export to ${config.otlp.endpoint} over ${config.otlp.protocol}, ${enabled.join(", ") || "nothing enabled"})\n`);
    return EXIT.OK;
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`${e.message}\n`);
      return EXIT.CONFIG;
    }
    throw e;
  }
}
