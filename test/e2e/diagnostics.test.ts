/**
 * `svc-agent diagnostics` of the compiled binary: the bundle unpacks with tar, its manifest lists exactly its
 * files, it works with a running agent (auth on, debug on: status, metrics, eBPF list and logs from the agent;
 * debug off: the recent logs still, only the debug-mode runtime variables missing) and without one (eBPF objects from the kernel, the rest listed as not collected), and a planted token appears
 * in no file of the unpacked bundle.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { BINARY, QUIET_CONFIG, spawnAgent, type AgentProcess } from "../helpers/agent-process";

const TOKEN = "planted-Secret-Token-9f3c1e";
const HEADER_SECRET = "planted-otlp-header-key-55aa";
const dir = mkdtempSync(join(tmpdir(), "svc-agent-diag-e2e-"));

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** A configuration with auth on (token from the environment) and an exporter header secret, listening on `port`. */
function configFor(port: number): string {
  return QUIET_CONFIG.replace("  listen: 127.0.0.1:0\n", `  listen: 127.0.0.1:${port}\n  auth:\n    enabled: true\n    bearer_token: \${API_TOKEN}\n`).replace(
    "otlp:\n",
    `otlp:\n  headers:\n    x-api-key: ${HEADER_SECRET}\n`,
  );
}

async function diagnostics(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: Uint8Array; stderr: string }> {
  const p = Bun.spawn([BINARY, "diagnostics", ...args], { stdout: "pipe", stderr: "pipe", env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env } });
  const [stdout, stderr] = await Promise.all([new Response(p.stdout).arrayBuffer(), new Response(p.stderr).text()]);
  return { code: await p.exited, stdout: new Uint8Array(stdout), stderr };
}

/** Unpacks with the system tar; returns the bundle's root directory. */
async function unpack(archive: string): Promise<string> {
  const out = mkdtempSync(join(dir, "unpacked-"));
  const p = Bun.spawn(["tar", "-xzf", archive, "-C", out], { stderr: "pipe" });
  expect(await p.exited).toBe(0);
  const roots = readdirSync(out);
  expect(roots.length).toBe(1);
  expect(roots[0]).toMatch(/^svc-agent-diagnostics-\d{8}T\d{6}Z$/);
  return join(out, roots[0]!);
}

function filesUnder(root: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(relative(root, p));
    }
  };
  walk(root);
  return out.sort();
}

interface Manifest {
  files: Array<{ name: string; bytes: number | null }>;
  not_collected: Array<{ item: string; reason: string }>;
  agent: { answered: boolean; auth: boolean };
}

function checkBundle(root: string): Manifest {
  const manifest = JSON.parse(readFileSync(join(root, "manifest.json"), "utf8")) as Manifest;
  expect(manifest.files.map((f) => f.name).sort()).toEqual(filesUnder(root));
  for (const f of manifest.files) if (f.bytes !== null) expect(statSync(join(root, f.name)).size).toBe(f.bytes);
  for (const file of filesUnder(root)) {
    const text = readFileSync(join(root, file), "utf8");
    expect(text).not.toContain(TOKEN);
    expect(text).not.toContain(HEADER_SECRET);
  }
  const kernel = JSON.parse(readFileSync(join(root, "kernel.json"), "utf8")) as Record<string, { present?: boolean; mounted?: boolean }> & { proc_version: string };
  expect(kernel.proc_version).toStartWith("Linux version");
  expect(typeof kernel.btf!.present).toBe("boolean");
  expect(typeof kernel.bpffs!.mounted).toBe("boolean");
  const config = readFileSync(join(root, "config.json"), "utf8");
  expect(config).toContain("[REDACTED]");
  return manifest;
}

describe("with a running agent (auth on, debug mode)", () => {
  let agent: AgentProcess;
  let configPath: string;
  beforeAll(async () => {
    const port = await freePort();
    configPath = join(dir, "running.yaml");
    writeFileSync(configPath, configFor(port));
    agent = await spawnAgent({ args: ["--config", configPath, "--debug"], env: { API_TOKEN: TOKEN } });
    // A log record that would carry the token if the logger did not scrub it.
    await fetch(`${agent.url}/status`, { headers: { authorization: `Bearer ${TOKEN}` } });
  });
  afterAll(async () => {
    await agent?.stop();
  });

  test("--output FILE: the agent's answers, metrics and logs, no token", async () => {
    const out = join(dir, "with-agent.tar.gz");
    const r = await diagnostics(["--config", configPath, "--output", out], { API_TOKEN: TOKEN });
    expect(r.code).toBe(0);
    expect(r.stderr).toContain("written to");
    expect(statSync(out).mode & 0o777).toBe(0o600);
    const root = await unpack(out);
    const manifest = checkBundle(root);
    expect(manifest.agent).toMatchObject({ answered: true, auth: true });
    const files = filesUnder(root);
    for (const f of ["config.json", "kernel.json", "metrics.txt", "agent/status.json", "agent/status-ebpf.json", "agent/status-export.json", "agent/status-discovery.json", "agent/ready.json", "agent/logs.json", "agent/vars.json"])
      expect(files).toContain(f);
    expect(readFileSync(join(root, "metrics.txt"), "utf8")).toContain("# TYPE svc_");
    const ebpf = JSON.parse(readFileSync(join(root, "agent/status-ebpf.json"), "utf8")) as { programs: unknown[]; maps: unknown[] };
    expect(Array.isArray(ebpf.programs) && Array.isArray(ebpf.maps)).toBe(true);
    const kernel = JSON.parse(readFileSync(join(root, "kernel.json"), "utf8")) as { agent_process: { pid: number; capabilities: { CapEff: { names: string[] } } } };
    expect(kernel.agent_process.pid).toBe(agent.proc.pid);
    expect(Array.isArray(kernel.agent_process.capabilities.CapEff.names)).toBe(true);
    const logs = JSON.parse(readFileSync(join(root, "agent/logs.json"), "utf8")) as { records: Array<{ msg: string }> };
    expect(logs.records.some((l) => l.msg === "listening")).toBe(true);
  }, 30_000);

  test("standard output: a tar.gz that tar lists", async () => {
    const r = await diagnostics(["--config", configPath], { API_TOKEN: TOKEN });
    expect(r.code).toBe(0);
    expect(r.stdout[0]).toBe(0x1f);
    expect(r.stdout[1]).toBe(0x8b);
    const out = join(dir, "stdout.tar.gz");
    writeFileSync(out, r.stdout);
    checkBundle(await unpack(out));
  }, 30_000);
});

describe("with a running agent not in debug mode", () => {
  test("the recent log records are in the bundle; only the runtime variables are listed as not collected", async () => {
    const configPath = join(dir, "no-debug.yaml");
    writeFileSync(configPath, configFor(await freePort()));
    const agent = await spawnAgent({ args: ["--config", configPath], env: { API_TOKEN: TOKEN } });
    try {
      writeFileSync(configPath, "bogus_key_for_a_logged_refusal: 1\n" + configFor(Number(new URL(agent.url).port)));
      expect((await fetch(`${agent.url}/admin/reload`, { method: "POST", headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(400);
      writeFileSync(configPath, configFor(Number(new URL(agent.url).port)));
      const out = join(dir, "no-debug.tar.gz");
      const r = await diagnostics(["--config", configPath, "--output", out], { API_TOKEN: TOKEN });
      expect(r.code).toBe(0);
      const root = await unpack(out);
      const manifest = checkBundle(root);
      expect(manifest.agent).toMatchObject({ answered: true, auth: true });
      const logs = JSON.parse(readFileSync(join(root, "agent/logs.json"), "utf8")) as { records: Array<{ msg: string; problems?: string[] }> };
      expect(logs.records.some((l) => l.msg === "listening")).toBe(true);
      const refused = logs.records.find((l) => l.msg === "reload rejected: invalid configuration");
      expect(refused?.problems).toEqual(["bogus_key_for_a_logged_refusal: unknown key (line 1, column 1)"]);
      expect(manifest.not_collected.map((m) => m.item)).toEqual(["agent/vars.json"]);
      expect(manifest.not_collected[0]!.reason).toContain("not in debug mode");
    } finally {
      expect(await agent.stop()).toBe(0);
    }
  }, 30_000);
});

describe("without a running agent", () => {
  test("kernel's eBPF list and kernel info; the agent's parts listed as not collected with the reason", async () => {
    const configPath = join(dir, "absent.yaml");
    writeFileSync(configPath, configFor(await freePort()));
    const out = join(dir, "without-agent.tar.gz");
    const r = await diagnostics(["--config", configPath, "--output", out], { API_TOKEN: TOKEN });
    expect(r.code).toBe(0);
    const root = await unpack(out);
    const manifest = checkBundle(root);
    expect(manifest.agent.answered).toBe(false);
    const metrics = manifest.not_collected.find((m) => m.item === "metrics.txt");
    expect(metrics?.reason).toMatch(/no agent answered at http:\/\/127\.0\.0\.1:\d+/);
    const files = filesUnder(root);
    expect(files).not.toContain("metrics.txt");
    // bpftool is installed by .ci/setup; as root it lists the kernel's programs (JSON array, possibly empty).
    if (files.includes("ebpf/programs.json")) expect(Array.isArray(JSON.parse(readFileSync(join(root, "ebpf/programs.json"), "utf8")))).toBe(true);
    else expect(manifest.not_collected.some((m) => m.item === "ebpf/programs.json" && m.reason.includes("bpftool"))).toBe(true);
  }, 30_000);

  test("an unreadable configuration is listed as not collected, the rest is still written", async () => {
    const out = join(dir, "bad-config.tar.gz");
    const r = await diagnostics(["--config", join(dir, "does-not-exist.yaml"), "--output", out]);
    expect(r.code).toBe(0);
    const root = await unpack(out);
    const manifest = JSON.parse(readFileSync(join(root, "manifest.json"), "utf8")) as Manifest;
    expect(manifest.files.map((f) => f.name).sort()).toEqual(filesUnder(root));
    expect(manifest.not_collected.find((m) => m.item === "config.json")?.reason).toContain("could not be loaded");
    expect(filesUnder(root)).toContain("kernel.json");
  }, 30_000);
});
