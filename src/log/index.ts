/** Logging: structured records to stderr, level filtering, a ring of recent records, secret scrubbing. */
export { Logger, type LogLevel, type LogFormat, type LogRecord, type LogSink, type LogContext } from "./logger";
export { LogSectionSchema, type LogSectionConfig } from "./config";
