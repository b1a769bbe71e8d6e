/** The log tailer's configuration for tests: `dir`/logs/*.log, a checkpoint under `dir`/state, fast polls; `overrides` on top. */
import { join } from "node:path";
import type { LogsConfig } from "../../src/collectors/logs/config";

export function testLogsConfig(dir: string, overrides: Partial<LogsConfig> = {}): LogsConfig {
  return {
    enabled: true,
    include: [join(dir, "logs/*.log")],
    exclude: [],
    format: "auto",
    start_at: "beginning",
    checkpoint_file: join(dir, "state/checkpoint.json"),
    checkpoint_interval: "50ms",
    poll_interval: "10ms",
    rescan_interval: "20ms",
    max_line_size: "8KiB",
    severity: "auto",
    multiline: [],
    ...overrides,
  };
}
