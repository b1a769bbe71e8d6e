/**
 * The compiled binary's command line: version, --validate-config, run with signals (SIGHUP reloads and never
 * kills, SIGTERM drains and exits 0, a second signal exits at once), a taken port, and the embedded defaults.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { OtlpReceiver } from "../../src/export/receiver";
import { BINARY, QUIET_CONFIG, spawnAgent } from "../helpers/agent-process";
import { json, waitUntil } from "../helpers/wait";

const dir = mkdtempSync(join(tmpdir(), "svc-cli-"));
const backend = new OtlpReceiver({ listen: "127.0.0.1:0" });
const OTLP_ENDPOINT = `127.0.0.1:${await backend.start()}`;
afterAll(() => backend.stop());

function run(args: string[], env: Record<string, string> = {}) {
  const p = Bun.spawnSync([BINARY, ...args], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env } });
  return { code: p.exitCode, stdout: p.stdout.toString(), stderr: p.stderr.toString() };
}

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

describe("version", () => {
  test.each([["version"], ["--version"]])("%s prints version, commit, build time and Bun version", (arg) => {
    const r = run([arg]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^svc-agent \d+\.\d+\.\d+\ncommit: [0-9a-f]{12}(-dirty)?\nbuilt: \d{4}-\d\d-\d\dT[\d:.]+Z\nbun: 1\.4\.5\n$/);
  });
});

describe("help", () => {
  test.each([["--help"], ["help"], ["run", "--help"], ["--validate-config", "--help"], ["version", "--help"], ["receive", "--help"], ["diagnostics", "--help"]])(
    "%s %s prints usage and exits 0",
    (...args) => {
      const r = run(args.filter(Boolean) as string[]);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain("Usage:");
    },
  );
  test("an unknown command or option is a usage error (exit 2)", () => {
    expect(run(["frobnicate"]).code).toBe(2);
    const r = run(["--nope"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("unknown option --nope");
  });
});

describe("--validate-config", () => {
  const example = resolve(import.meta.dir, "../../deploy/config.example.yaml");
  test("exits 0 with a one-line summary on the shipped example", () => {
    const r = run(["--validate-config", example], { API_TOKEN: "x" });
    expect(r.code).toBe(0);
    expect(r.stdout.trim().split("\n")).toHaveLength(1);
    expect(r.stdout).toContain("valid");
  });

  test.each([
    ["unknown key", "self_telemetry:\n  listn: ':1'\n", "self_telemetry.listn: unknown key"],
    ["wrong type", "agent:\n  ebpf:\n    enabled: maybe\n", "agent.ebpf.enabled: expected boolean"],
    ["bad duration", "backoff:\n  initial: fast\n", "backoff.initial: expected a duration"],
    ["bad size", "queues:\n  logs:\n    mem_limit: lots\n", "queues.logs.mem_limit: expected a size"],
    ["out of range", "agent:\n  profiling:\n    sample_rate: 0\n", "agent.profiling.sample_rate:"],
    ["unset variable", "otlp:\n  endpoint: ${SVC_TEST_UNSET_VAR}\n", "otlp.endpoint: environment variable SVC_TEST_UNSET_VAR is not set"],
    ["cross-field rule", "self_telemetry:\n  auth:\n    enabled: true\n", "self_telemetry.auth.bearer_token: must be set"],
  ])("exits 2 on a %s, naming the key path", (name, text, message) => {
    const r = run(["--validate-config", file(`${name}.yaml`, text)]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(message);
    expect(r.stdout).toBe("");
  });

  test("every problem is listed at once", () => {
    const r = run(["--validate-config", file("many.yaml", "a: 1\nb: 2\nbackoff:\n  max: x\n")]);
    expect(r.code).toBe(2);
    for (const m of ["a: unknown key", "b: unknown key", "backoff.max: expected a duration"]) expect(r.stderr).toContain(m);
  });

  test("a missing file is a configuration error", () => {
    const r = run(["--validate-config", join(dir, "nope.yaml")]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("no such file");
  });
});

describe("run", () => {
  test("an invalid configuration exits 2 before starting anything", () => {
    const r = run(["--config", file("bad-run.yaml", "bogus: 1\n")]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("bogus: unknown key");
  });

  test("logs 'listening' with the bound address; SIGHUP reloads and the agent stays up; SIGTERM exits 0", async () => {
    const agent = await spawnAgent({ env: { OTLP_ENDPOINT } });
    try {
      expect(agent.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect((await fetch(`${agent.url}/healthz`)).status).toBe(200);
      writeFileSync(agent.configPath, QUIET_CONFIG + "service_name: after-sighup\n");
      for (let i = 1; i <= 3; i++) {
        agent.proc.kill("SIGHUP");
        await agent.waitFor((r) => r.msg === "configuration reloaded" && r.generation === i);
      }
      // A storm: the kernel merges pending signals of one kind, so some of these coalesce; none may kill the agent.
      for (let i = 0; i < 50; i++) agent.proc.kill("SIGHUP");
      await agent.waitFor((r) => r.msg === "configuration reloaded" && Number(r.generation) >= 4);
      expect(agent.proc.exitCode).toBeNull();
      expect((await fetch(`${agent.url}/healthz`)).status).toBe(200);
      const cfg = await json(await fetch(`${agent.url}/config`));
      expect(cfg.service_name).toBe("after-sighup");
      // An invalid file on SIGHUP leaves the agent running on the previous configuration.
      writeFileSync(agent.configPath, "bogus: 1\n");
      agent.proc.kill("SIGHUP");
      await agent.waitFor((r) => r.msg === "reload rejected: invalid configuration");
      expect((await fetch(`${agent.url}/healthz`)).status).toBe(200);
    } finally {
      expect(await agent.stop()).toBe(0);
    }
    expect(agent.records.some((r) => r.msg === "stopped")).toBe(true);
  });

  test("once start-up is over the executable's start-up pages leave the resident set, and the agent answers on", async () => {
    const agent = await spawnAgent({ config: `svc:\n  log_level: debug\n${QUIET_CONFIG}`, env: { OTLP_ENDPOINT } });
    try {
      const released = await agent.waitFor((r) => r.msg === "start-up pages of the executable released from the resident set", 60_000);
      expect(Number(released.resident_bytes)).toBeGreaterThan(0);
      // The embedded bundle's pages too: code first run after the release (the OpenAPI document's generation) has
      // its bytecode read back from the file.
      expect(Number(released.bundle_bytes)).toBeGreaterThan(0);
      expect(Number(released.bundle_bytes)).toBeLessThanOrEqual(Number(released.resident_bytes));
      expect((await fetch(`${agent.url}/healthz`)).status).toBe(200);
      expect((await fetch(`${agent.url}/metrics`)).status).toBe(200);
      const openapi = await fetch(`${agent.url}/openapi.json`);
      expect(openapi.status).toBe(200);
      const document = (await openapi.json()) as { openapi: string; paths: Record<string, unknown> };
      expect(document.openapi).toBe("3.1.0");
      expect(Object.keys(document.paths)).toContain("/healthz");
    } finally {
      expect(await agent.stop()).toBe(0);
    }
  });

  test("a second signal exits at once", async () => {
    // A backend that never answers keeps the shutdown drain busy until the second signal.
    const agent = await spawnAgent({
      config: QUIET_CONFIG + "shutdown_timeout: 1m\n",
      env: { OTLP_ENDPOINT: "127.0.0.1:9" },
    });
    agent.proc.kill("SIGTERM");
    await agent.waitFor((r) => r.msg === "signal received: shutting down");
    agent.proc.kill("SIGTERM");
    const code = await agent.proc.exited;
    expect(code === 0 || code === 1).toBe(true);
    await agent.waitFor((r) => r.msg === "second signal: exiting at once" || r.msg === "stopped");
  });

  test("a listen address that is taken is a runtime failure (exit 1) with a clear error", async () => {
    const blocker = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("x") });
    try {
      const agent = await spawnAgent({
        config: QUIET_CONFIG.replace("listen: 127.0.0.1:0", `listen: 127.0.0.1:${blocker.port}`),
        env: { OTLP_ENDPOINT },
        waitListening: false,
      });
      expect(await agent.proc.exited).toBe(1);
      expect(agent.stderr()).toContain(`cannot listen on 127.0.0.1:${blocker.port}`);
    } finally {
      blocker.stop(true);
    }
  });

  test("without --config it runs on the embedded defaults (in a private network namespace, where :19090 is free)", async () => {
    const script = `ip link set lo up; ${BINARY} & pid=$!;
      for i in $(seq 1 100); do curl -sf http://127.0.0.1:19090/healthz && break; sleep 0.1; done; echo;
      curl -s http://127.0.0.1:19090/config; echo; kill -TERM $pid; wait $pid; echo "exit=$?"`;
    const p = Bun.spawn(["unshare", "--net", "--mount-proc", "--pid", "--fork", "bash", "-c", script], {
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const out = await new Response(p.stdout).text();
    await p.exited;
    const lines = out.trim().split("\n");
    expect(lines[0]).toBe('{"status":"ok"}');
    const cfg = JSON.parse(lines[1]!);
    expect(cfg.self_telemetry.listen).toBe(":19090");
    expect(cfg.otlp.endpoint).toBe("127.0.0.1:4317");
    expect(lines[2]).toBe("exit=0");
  });
});

test("the README's run command starts an agent whose /healthz answers (checked by the test above); SVC_CONFIG is honoured", async () => {
  const path = file("via-env.yaml", QUIET_CONFIG + "service_name: from-env\n");
  const agent = await spawnAgent({ args: [], env: { SVC_CONFIG: path, OTLP_ENDPOINT } });
  try {
    await waitUntil(async () => (await fetch(`${agent.url}/healthz`)).status === 200);
    expect((await json(await fetch(`${agent.url}/config`))).service_name).toBe("from-env");
  } finally {
    expect(await agent.stop()).toBe(0);
  }
});
