/** The key `agent.logs`, owned by the log file collector. */
import { Type, type Static } from "@sinclair/typebox";
import type { ConfigProblem } from "../../config/problems";
import { keysIn } from "../../config/compose";
import type { Config } from "../../config/schema";
import { Duration, Size, msOf, bytesOf } from "../../config/units";

const MIN_LOG_LINE_BYTES = 1024;
const MAX_LOG_LINE_BYTES = 16 * 1024 * 1024;
const MAX_MULTILINE_BYTES = 64 * 1024 * 1024;

export const MultilineRuleSchema = Type.Object(
  {
    include: Type.Array(Type.String({ minLength: 1 }), {
      minItems: 1,
      description: "Glob patterns of the files the rule applies to (a file takes the first rule one of whose patterns matches its path).",
    }),
    start_pattern: Type.String({
      minLength: 1,
      description:
        "Regular expression (JavaScript syntax) matching the first line of a record; the lines that follow up to the next matching line are joined to it with newlines.",
    }),
    max_lines: Type.Integer({ minimum: 1, default: 1000, description: "Most lines in one record; later lines up to the next start line are dropped (log.truncated=true)." }),
    max_bytes: Size("1MiB", "Most bytes in one record's body; later lines up to the next start line are dropped (log.truncated=true)."),
    flush_timeout: Duration("1s", "A record in progress is sent when the file was read to its end and no new line came for this long."),
  },
  { additionalProperties: false },
);
export type MultilineRuleConfig = Static<typeof MultilineRuleSchema>;

export const LogsSchema = Type.Object(
  {
    enabled: Type.Boolean({ default: false, description: "Tail log files and export their lines as OTLP logs." }),
    include: Type.Array(Type.String({ minLength: 1 }), {
      default: ["/var/log/containers/*.log", "/var/log/pods/**/*.log"],
      description: "Glob patterns of the files to tail (absolute; `**` crosses directories). A file reached by two patterns or a symlink is read once.",
    }),
    exclude: Type.Array(Type.String({ minLength: 1 }), {
      default: ["**/*.gz"],
      description: "Glob patterns of files never tailed, even when include matches them.",
    }),
    format: Type.Union([Type.Literal("auto"), Type.Literal("cri"), Type.Literal("docker"), Type.Literal("raw")], {
      default: "auto",
      description: "Line format: cri (containerd/CRI-O), docker (json-file), raw (the line is the message) or auto (detected per line).",
    }),
    start_at: Type.Union([Type.Literal("beginning"), Type.Literal("end")], {
      default: "beginning",
      description: "Where a file without a checkpoint entry is read from when it is first seen at startup (files appearing later are always read from the beginning).",
    }),
    checkpoint_file: Type.String({
      default: "/var/lib/svc-agent/logs-checkpoint.json",
      minLength: 1,
      description: "Where read positions are kept across restarts (written atomically; its directory is created).",
    }),
    checkpoint_interval: Duration("1s", "How often read positions are flushed to the export pipeline and then written to checkpoint_file."),
    poll_interval: Duration("250ms", "How often tailed files are checked for new data."),
    rescan_interval: Duration("5s", "How often the include patterns are expanded again to find new files."),
    max_line_size: Size("256KiB", "Longest line kept; the rest of a longer line is cut off (the record gets the attribute log.truncated=true)."),
    severity: Type.Union([Type.Literal("auto"), Type.Literal("none")], {
      default: "auto",
      description:
        "auto: severity_number and severity_text from the message (JSON level/severity keys, logfmt level=, else the first level word near the start of a plain line; README, Log collection); none: left unset.",
    }),
    multiline: Type.Array(MultilineRuleSchema, {
      default: [],
      description: "Rules that join the lines of a record (stack traces) in the files they match; files no rule matches give one record per line.",
    }),
  },
  { additionalProperties: false, default: {} },
);
export type LogsConfig = Static<typeof LogsSchema>;

/** Its keys, rules and switch, composed by src/collectors/registry.ts, where it has its entry. */
export const logsConfig = {
  config: { logs: LogsSchema },
  enabled: (c: Config): boolean => logsOf(c).enabled,
  validate(c: { logs: LogsConfig }): ConfigProblem[] {
    const problems: ConfigProblem[] = [];
    for (const key of ["checkpoint_interval", "poll_interval", "rescan_interval"] as const)
      if (msOf(c.logs, key) <= 0) problems.push({ path: `agent.logs.${key}`, message: "must be greater than 0" });
    const line = bytesOf(c.logs, "max_line_size");
    if (line < MIN_LOG_LINE_BYTES || line > MAX_LOG_LINE_BYTES)
      problems.push({ path: "agent.logs.max_line_size", message: `must be between 1KiB and 16MiB, got ${line} bytes` });
    c.logs.multiline.forEach((r, i) => {
      const key = `agent.logs.multiline[${i}]`;
      const problem = regexProblem(r.start_pattern);
      if (problem) problems.push({ path: `${key}.start_pattern`, message: `not a valid regular expression: ${problem}` });
      const bytes = bytesOf(r, "max_bytes");
      if (bytes < MIN_LOG_LINE_BYTES || bytes > MAX_MULTILINE_BYTES)
        problems.push({ path: `${key}.max_bytes`, message: `must be between 1KiB and 64MiB, got ${bytes} bytes` });
      if (msOf(r, "flush_timeout") <= 0) problems.push({ path: `${key}.flush_timeout`, message: "must be greater than 0" });
      r.include.forEach((p, j) => {
        if (!p.startsWith("/") && !p.startsWith("**")) problems.push({ path: `${key}.include[${j}]`, message: `must be an absolute pattern or start with **, got ${JSON.stringify(p)}` });
      });
    });
    c.logs.include.forEach((p, i) => {
      if (!p.startsWith("/")) problems.push({ path: `agent.logs.include.${i}`, message: `must be an absolute pattern, got ${JSON.stringify(p)}` });
    });
    return problems;
  },
};

/** Why `pattern` does not compile as a JavaScript regular expression; undefined when it does. */
function regexProblem(pattern: string): string | undefined {
  try {
    new RegExp(pattern);
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
}

/** `agent.logs` of a running configuration. */
export const logsOf = (c: Config): LogsConfig => keysIn(logsConfig, c.agent).logs;
