/**
 * Configuration problems as the compiled binary reports them: a value written under a secret key, whatever its
 * type, appears in none of the three places a refused configuration is described (the 400 answer of
 * POST /admin/reload, `--validate-config` output, the diagnostics bundle's manifest), while the key is named;
 * every problem carries its line and column; `help` with an unknown topic is a usage error.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BINARY, QUIET_CONFIG, spawnAgent, type AgentProcess } from "../helpers/agent-process";
import { MARKER, MARKER_NUMBER, MISTYPED_SECRETS } from "../helpers/mistyped-secrets";

const dir = mkdtempSync(join(tmpdir(), "svc-cfg-problems-"));
const TOKEN = "e2e-config-problems-token-41c7";
const env = { PATH: process.env.PATH ?? "/usr/bin:/bin" };

function run(args: string[]) {
  const p = Bun.spawnSync([BINARY, ...args], { env });
  return { code: p.exitCode, stdout: p.stdout.toString(), stderr: p.stderr.toString() };
}

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

const showsMarker = (text: string) => text.includes(MARKER) || text.includes(MARKER_NUMBER);

describe("a mistyped secret is never printed", () => {
  let agent: AgentProcess;
  beforeAll(async () => {
    agent = await spawnAgent({ config: QUIET_CONFIG.replace("self_telemetry:\n", `self_telemetry:\n  auth:\n    enabled: true\n    bearer_token: ${TOKEN}\n`) });
  });
  afterAll(async () => {
    expect(await agent.stop()).toBe(0);
  });

  test.each(MISTYPED_SECRETS)("%s: /admin/reload 400, --validate-config, diagnostics manifest", async (name, text, path) => {
    // POST /admin/reload: 400 naming the key with its place in the file, the value nowhere.
    writeFileSync(agent.configPath, mergeInto(text));
    const r = await fetch(`${agent.url}/admin/reload`, { method: "POST", headers: { authorization: `Bearer ${TOKEN}` } });
    const body = await r.text();
    expect(r.status).toBe(400);
    const problems = (JSON.parse(body) as { details: { problems: Array<{ path: string; line?: number; column?: number }> } }).details.problems;
    const mine = problems.find((p) => p.path === path);
    expect(mine).toBeDefined();
    expect(mine!.line).toBeGreaterThan(0);
    expect(mine!.column).toBeGreaterThan(0);
    expect(showsMarker(body)).toBe(false);

    // --validate-config: exit 2, the key named, the value nowhere.
    const bad = file(`${name.replace(/\W+/g, "-")}.yaml`, text);
    const v = run(["--validate-config", bad]);
    expect(v.code).toBe(2);
    expect(v.stderr).toContain(`${path}: `);
    expect(showsMarker(v.stdout + v.stderr)).toBe(false);

    // diagnostics: the configuration is listed as not collected with the reason, which names the key only.
    const out = join(dir, `${name.replace(/\W+/g, "-")}.tar.gz`);
    const d = Bun.spawnSync([BINARY, "diagnostics", "--config", bad, "--output", out], { env });
    expect(d.exitCode).toBe(0);
    expect(showsMarker(d.stdout.toString() + d.stderr.toString())).toBe(false);
    const unpacked = mkdtempSync(join(dir, "unpacked-"));
    expect(Bun.spawnSync(["tar", "-xzf", out, "-C", unpacked]).exitCode).toBe(0);
    const root = join(unpacked, readdirSync(unpacked)[0]!);
    const manifest = readFileSync(join(root, "manifest.json"), "utf8");
    const reason = (JSON.parse(manifest) as { not_collected: Array<{ item: string; reason: string }> }).not_collected.find((m) => m.item === "config.json")?.reason;
    expect(reason).toContain(path);
    expect(showsMarker(manifest)).toBe(false);
    for (const f of readdirSync(root, { recursive: true }) as string[]) {
      const p = join(root, f);
      if (statSync(p).isFile()) expect(showsMarker(readFileSync(p, "utf8"))).toBe(false);
    }
  }, 30_000);
});

/** QUIET_CONFIG with the case's section merged in (the agent keeps listening on its address whatever the case says). */
function mergeInto(text: string): string {
  const [section, ...rest] = text.split("\n");
  const body = rest.join("\n");
  if (section === "self_telemetry:") return QUIET_CONFIG.replace("self_telemetry:\n", `self_telemetry:\n${body}`);
  if (section === "otlp:") return QUIET_CONFIG.replace("otlp:\n", `otlp:\n${body}`);
  throw new Error(`no merge for ${section}`);
}

describe("--validate-config gives a line and column for every problem", () => {
  test("syntax, schema, unknown-key, variable and cross-field problems", () => {
    const cases: Array<[string, string[]]> = [
      ["mode: agent\nmode: agent\n", ["(document): YAML: Map keys must be unique (line 2, column 1)"]],
      [
        "self_telemetry:\n  listen: 5\n  bogus: 1\nbackoff:\n  initial: fast\notlp:\n  endpoint: ${SVC_TEST_UNSET_VAR}\n",
        [
          "self_telemetry.bogus: unknown key (line 3, column 3)",
          "self_telemetry.listen: expected string, got 5 (line 2, column 11)",
          "backoff.initial: expected a duration like 500ms, 1s or 2m, got \"fast\" (line 5, column 12)",
          "otlp.endpoint: environment variable SVC_TEST_UNSET_VAR is not set (write ${SVC_TEST_UNSET_VAR:-default} to give a default) (line 7, column 13)",
        ],
      ],
      ["queues:\n  logs:\n    capacity: 10\n    batch_size: 20\n", ["queues.logs.batch_size: (20) must not exceed queues.logs.capacity (10) (line 4, column 17)"]],
    ];
    for (const [text, lines] of cases) {
      const r = run(["--validate-config", file("located.yaml", text)]);
      expect(r.code).toBe(2);
      const got = r.stderr.trim().split("\n").slice(1).map((l) => l.trim());
      expect(got.sort()).toEqual([...lines].sort());
      for (const l of got) expect(l).toMatch(/ \(line \d+, column \d+\)$/);
    }
  });
});

describe("help", () => {
  test("an unknown topic is a usage error (exit 2) naming the topics", () => {
    const r = run(["help", "nosuch"]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain('svc-agent: no help topic "nosuch"; topics: help, run, validate-config, version, ');
    expect(r.stderr).toMatch(/topics: .*\bdiagnostics\b.*\bconfig\n/);
  });

  test.each(["run", "validate-config", "version", "receive", "diagnostics"])("help %s prints that command's usage", (topic) => {
    const r = run(["help", topic]);
    expect(r.code).toBe(0);
    expect(r.stdout).toStartWith("Usage: svc-agent");
  });

  test("help config prints the reference; help alone the main usage", () => {
    expect(run(["help", "config"]).stdout).toContain("| `self_telemetry.auth.bearer_token` |");
    expect(run(["help"]).stdout).toContain("Usage:");
  });
});
