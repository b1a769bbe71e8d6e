/**
 * Values under secret keys never appear in a validation message, whatever their type or the kind of problem;
 * tokens no client could send are refused; the secret-key list answers for environment-mapped keys too.
 */
import { describe, expect, test } from "bun:test";
import { ConfigError, parseConfig } from "../../../src/config";
import { isSecretPath, mayHoldSecret, redactConfig, scrubText, secretsOf } from "../../../src/config/secrets";
import { MARKER, MARKER_NUMBER, MISTYPED_SECRETS } from "../../helpers/mistyped-secrets";

function refusal(text: string): ConfigError {
  try {
    parseConfig(text, {});
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
  throw new Error("expected the configuration to be refused");
}

describe("mistyped secrets are never echoed", () => {
  test.each(MISTYPED_SECRETS)("%s: refused, the key named, the value nowhere", (_name, text, path) => {
    const e = refusal(text);
    expect(e.problems.map((p) => p.path)).toContain(path);
    const everything = e.message + JSON.stringify(e.problems);
    expect(everything).not.toContain(MARKER);
    expect(everything).not.toContain(MARKER_NUMBER);
  });

  test("a value elsewhere is still shown (it helps), and its type is said for a secret", () => {
    const e = refusal(`self_telemetry:\n  listen: [a]\n  auth:\n    bearer_token: [${MARKER}]\n`);
    const byPath = Object.fromEntries(e.problems.map((p) => [p.path, p.message]));
    expect(byPath["self_telemetry.listen"]).toContain('["a"]');
    expect(byPath["self_telemetry.auth.bearer_token"]).toBe("expected string, got an array (value not shown: secret key)");
  });
});

describe("tokens no client could send", () => {
  test.each([" lead", "trail ", "in side", "tab\there", "nl\nx", "del\u007f", "caf\u00e9"])("%j is refused", (token) => {
    const e = refusal(`self_telemetry:\n  auth:\n    enabled: true\n    bearer_token: ${JSON.stringify(token)}\n    read_only_tokens: [${JSON.stringify(token)}]\n`);
    expect(e.problems.map((p) => p.path)).toEqual(["self_telemetry.auth.bearer_token", "self_telemetry.auth.read_only_tokens[0]"]);
    expect(e.problems[0]!.message).toContain("no client can send it");
  });

  test("visible ASCII tokens (base64, base64url, hex) are accepted", () => {
    const c = parseConfig('self_telemetry:\n  auth:\n    enabled: true\n    bearer_token: "a+b/c=="\n    read_only_tokens: ["x-y_z.~", "0f9e"]\n', {});
    expect(c.self_telemetry.auth.bearer_token).toBe("a+b/c==");
  });
});

describe("the secret-key list (one place)", () => {
  test("secret paths, inside and outside the schema's own keys", () => {
    for (const p of ["self_telemetry.auth.bearer_token", "self_telemetry.auth.read_only_tokens[3]", "otlp.headers.x-honeycomb-team", "otlp.headers.a.b", "otlp.tls.key_file", "x.client_secret", "db.password"])
      expect(isSecretPath(p)).toBe(true);
    for (const p of ["otlp.endpoint", "otlp.headers", "self_telemetry.auth", "self_telemetry.auth.enabled", "agent.discovery.kubernetes.kubeconfig"])
      expect(isSecretPath(p)).toBe(false);
  });

  test("sections that hold secrets, and the document itself, are treated as secret in messages", () => {
    for (const p of ["", "self_telemetry", "self_telemetry.auth", "otlp", "otlp.headers", "otlp.tls"]) expect(mayHoldSecret(p)).toBe(true);
    for (const p of ["queues", "queues.traces.capacity", "self_telemetry.listen", "agent.logs.include[0]"]) expect(mayHoldSecret(p)).toBe(false);
  });

  test("redaction and the scrub list use the same keys", () => {
    const c = parseConfig(`self_telemetry:\n  auth:\n    bearer_token: t0k3n\n    read_only_tokens: [r3ad]\notlp:\n  headers:\n    api: h3ad3r\n`, {});
    expect(secretsOf(c).sort()).toEqual(["h3ad3r", "r3ad", "t0k3n"]);
    const r = redactConfig(c);
    expect(JSON.stringify(r)).not.toMatch(/t0k3n|r3ad|h3ad3r/);
    expect(r.self_telemetry.auth.read_only_tokens).toEqual(["[REDACTED]"]);
  });
});

describe("scrubbing free text", () => {
  test("a short secret is replaced where it stands as a token, never inside another word", () => {
    expect(scrubText('{"msg":"export ready","token":"x"}', ["x"])).toBe('{"msg":"export ready","token":"[REDACTED]"}');
    expect(scrubText("Bearer ab12 refused; ab123 is another word", ["ab12"])).toBe("Bearer [REDACTED] refused; ab123 is another word");
  });

  test("a long secret is replaced wherever it appears, its JSON-escaped form too", () => {
    const long = 'k"3y-0123456789abcdef';
    expect(scrubText(`prefix${long}suffix`, [long])).toBe("prefix[REDACTED]suffix");
    expect(scrubText(JSON.stringify({ v: long }), [long])).toBe('{"v":"[REDACTED]"}');
  });

  test("characters special to regular expressions in a short secret are taken literally", () => {
    expect(scrubText("a.b+c? and axb+c", ["a.b+c?"])).toBe("[REDACTED] and axb+c");
  });
});
