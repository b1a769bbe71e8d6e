/** Invalid configurations that put a marker value under a secret key in several wrong types, for the tests that check no output shows it. */
/** Appears in every case (as text, or as MARKER_NUMBER); no output may contain it. */
export const MARKER = "Mk7q-secret-marker";
export const MARKER_NUMBER = "918273645";

/** Invalid documents that put MARKER (or a number) under a secret key, each with the key path reported. */
export const MISTYPED_SECRETS: Array<[string, string, string]> = [
  ["bearer_token as a list", `self_telemetry:\n  auth:\n    bearer_token: [${MARKER}]\n`, "self_telemetry.auth.bearer_token"],
  ["bearer_token as a mapping", `self_telemetry:\n  auth:\n    bearer_token: {a: ${MARKER}}\n`, "self_telemetry.auth.bearer_token"],
  ["read_only_tokens as a string", `self_telemetry:\n  auth:\n    read_only_tokens: "${MARKER}"\n`, "self_telemetry.auth.read_only_tokens"],
  ["read_only_tokens holding a list", `self_telemetry:\n  auth:\n    read_only_tokens: [[${MARKER}]]\n`, "self_telemetry.auth.read_only_tokens[0]"],
  ["an OTLP header value as a list", `otlp:\n  headers:\n    x-api-key: [${MARKER}]\n`, "otlp.headers.x-api-key"],
  ["an OTLP header value as a number", `otlp:\n  headers:\n    x-api-key: ${MARKER_NUMBER}\n`, "otlp.headers.x-api-key"],
  ["otlp.headers as a string", `otlp:\n  headers: "${MARKER}"\n`, "otlp.headers"],
  ["the auth section as a string", `self_telemetry:\n  auth: ${MARKER}\n`, "self_telemetry.auth"],
  ["a malformed variable reference in a token", `self_telemetry:\n  auth:\n    bearer_token: "${MARKER}\${OOPS"\n`, "self_telemetry.auth.bearer_token"],
  ["a token with a space", `self_telemetry:\n  auth:\n    enabled: true\n    bearer_token: "${MARKER} x"\n`, "self_telemetry.auth.bearer_token"],
  ["a read-only token with a control character", `self_telemetry:\n  auth:\n    read_only_tokens: ["${MARKER}\\u0007"]\n`, "self_telemetry.auth.read_only_tokens[0]"],
];
