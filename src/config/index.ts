/** Configuration: component schemas composed into one document, loaded with defaults, ${VAR} and SVC_* overrides, checked strictly. */
export { configSchema, validateConfig, type Config } from "./schema";
export { ConfigSchema, validateDocument, type ConfigDocument } from "./document";
export { loadConfig, parseConfig, resolveConfigPath, embeddedDefaultText, keyPath, SYSTEM_CONFIG_PATH, type LoadedConfig } from "./load";
export { ConfigError, formatProblem, type ConfigProblem } from "./problems";
export { parseDuration, parseSize, durationMs, sizeBytes, msOf, bytesOf, formatDuration } from "./units";
export { REDACTED, isSecretPath, redactConfig, secretsOf } from "./secrets";
