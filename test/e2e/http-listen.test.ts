/**
 * The HTTP interface owns its listen address alone, checked with real processes: a second agent on a busy address
 * exits 1 (it does not share the port through SO_REUSEPORT), whether the address is held by another agent or by a
 * non-Bun process (python, with and without SO_REUSEPORT on its own socket); a reload to a busy address answers
 * 500 and keeps the old one; a reload that keeps the address and changes the body limit rebinds it in place.
 * A metrics path that would shadow one of the interface's routes is refused before anything starts.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { OtlpReceiver } from "../../src/export/receiver";
import { BINARY, QUIET_CONFIG, spawnAgent, type AgentProcess } from "../helpers/agent-process";
import { json, waitUntil } from "../helpers/wait";

const TOKEN = "listen-Token-31";
let backend: OtlpReceiver;
let OTLP_ENDPOINT: string;
const running: AgentProcess[] = [];
const holders: Array<ReturnType<typeof Bun.spawn>> = [];

beforeAll(async () => {
  backend = new OtlpReceiver({ listen: "127.0.0.1:0" });
  OTLP_ENDPOINT = `127.0.0.1:${await backend.start()}`;
});

afterAll(async () => {
  for (const a of running) await a.stop();
  for (const h of holders) {
    h.kill("SIGTERM");
    await h.exited;
  }
  await backend?.stop();
});

const withListen = (listen: string, extra = "") => QUIET_CONFIG.replace("listen: 127.0.0.1:0", `listen: ${listen}`).replace("self_telemetry:\n", `self_telemetry:\n${extra}`);
const AUTH = `  auth:\n    enabled: true\n    bearer_token: \${API_TOKEN}\n`;

async function agentOn(listen: string, extra = ""): Promise<AgentProcess> {
  const a = await spawnAgent({ config: withListen(listen, extra), env: { OTLP_ENDPOINT, API_TOKEN: TOKEN } });
  running.push(a);
  return a;
}

/** Starts an agent expected not to start; resolves with its exit code and its log text. */
async function failingAgentOn(listen: string): Promise<{ code: number; stderr: string }> {
  const a = await spawnAgent({ config: withListen(listen, AUTH), env: { OTLP_ENDPOINT, API_TOKEN: TOKEN }, waitListening: false });
  running.push(a);
  // One that keeps running instead (sharing the port) is stopped after a while, and the exit code tells.
  const timer = setTimeout(() => a.proc.kill("SIGKILL"), 15_000);
  const code = await a.proc.exited;
  clearTimeout(timer);
  return { code, stderr: a.stderr() };
}

/** A python process listening on a loopback port (SO_REUSEPORT set on its socket when `reusePort`); resolves with the port. */
async function pythonHolder(reusePort: boolean): Promise<number> {
  const script = [
    "import socket, sys",
    "s = socket.socket()",
    reusePort ? "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)" : "",
    "s.bind(('127.0.0.1', 0))",
    "s.listen(16)",
    "print(s.getsockname()[1], flush=True)",
    "sys.stdin.read()",
  ].join("\n");
  const p = Bun.spawn(["/usr/bin/python3", "-c", script], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  holders.push(p);
  const reader = p.stdout.getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error("python holder exited early");
    text += new TextDecoder().decode(value);
  }
  return Number(text.trim());
}

const portOf = (a: AgentProcess) => Number(a.url.slice(a.url.lastIndexOf(":") + 1));

describe("at start", () => {
  test("a second agent on the first one's address exits 1 saying the address is in use; the first answers every request", async () => {
    const first = await agentOn("127.0.0.1:0");
    const port = portOf(first);
    const second = await failingAgentOn(`127.0.0.1:${port}`);
    expect(second.code).toBe(1);
    expect(second.stderr).toContain(`cannot listen on 127.0.0.1:${port}: address already in use`);
    // The second agent required a token: had it shared the port, some of these would be 401.
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) statuses.push((await fetch(`${first.url}/status`)).status);
    expect(statuses).toEqual(Array(10).fill(200));
  });

  test.each([false, true])("an address held by a python socket (SO_REUSEPORT %p) makes the agent exit 1", async (reusePort) => {
    const port = await pythonHolder(reusePort);
    const r = await failingAgentOn(`127.0.0.1:${port}`);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`cannot listen on 127.0.0.1:${port}: address already in use`);
  });
});

describe("at reload", () => {
  const admin = { authorization: `Bearer ${TOKEN}` };

  async function reloadTo(a: AgentProcess, listen: string, extra = AUTH): Promise<Response> {
    writeFileSync(a.configPath, withListen(listen, extra));
    // A fresh connection: a rebind in place closes the connections of the old listener, pooled ones included.
    return fetch(`${a.url}/admin/reload`, { method: "POST", headers: admin, keepalive: false });
  }

  test("to an address another agent holds: 500, the old address keeps serving, the other agent keeps its port", async () => {
    const a = await agentOn("127.0.0.1:0", AUTH);
    const other = await agentOn("127.0.0.1:0"); // no auth: its answers to /status are 200, a's would be 401
    const port = portOf(other);
    const r = await reloadTo(a, `127.0.0.1:${port}`);
    expect(r.status).toBe(500);
    const body = await json(r);
    expect(body.error).toBe("internal_error");
    expect(body.message).toContain(`cannot listen on 127.0.0.1:${port}: address already in use`);
    expect((await fetch(`${a.url}/healthz`)).status).toBe(200);
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) statuses.push((await fetch(`${other.url}/status`)).status);
    expect(statuses).toEqual(Array(10).fill(200));
  });

  test.each([false, true])("to an address a python socket holds (SO_REUSEPORT %p): 500, the old address keeps serving", async (reusePort) => {
    const a = await agentOn("127.0.0.1:0", AUTH);
    const port = await pythonHolder(reusePort);
    const r = await reloadTo(a, `127.0.0.1:${port}`);
    expect(r.status).toBe(500);
    expect((await json(r)).message).toContain("address already in use");
    expect((await fetch(`${a.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${a.url}/status`, { headers: admin })).status).toBe(200);
  });

  test("same address, new max_body_bytes: 200, rebound in place, the new limit applies", async () => {
    // A fixed port: the agent's own, learnt from a first start on port 0 and then written into its configuration.
    const a = await agentOn("127.0.0.1:0", AUTH);
    const listen = a.url.replace("http://", "");
    const announced = () => a.records.filter((x) => x.msg === "listening" && x.address === listen).length;
    expect((await reloadTo(a, listen)).status).toBe(200);
    await waitUntil(() => announced() === 2, { what: "the listener rebound on its own port" });
    const r = await reloadTo(a, listen, AUTH + "  max_body_bytes: 100\n");
    expect(r.status).toBe(200);
    await waitUntil(() => announced() === 3, { what: "the listener rebound with the new limit" });
    const big = await fetch(`${a.url}/admin/flush`, { method: "POST", headers: admin, body: "x".repeat(200), keepalive: false });
    expect(big.status).toBe(413);
    expect((await json(big)).details).toEqual({ max_body_bytes: 100 });
    expect((await fetch(`${a.url}/admin/flush`, { method: "POST", headers: admin, body: "x".repeat(50), keepalive: false })).status).toBe(200);
  });
});

describe("the metrics path", () => {
  test("a path that would shadow a route (/healthz, /api/v1/status) is refused by the binary, naming the key", () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-path-"));
    for (const path of ["/healthz", "/api/v1/status"]) {
      const file = join(dir, "config.yaml");
      writeFileSync(file, withListen("127.0.0.1:0", `  path: ${path}\n`));
      const p = Bun.spawnSync([BINARY, "--validate-config", file]);
      expect(p.exitCode).toBe(2);
      expect(p.stderr.toString()).toContain(`self_telemetry.path: "${path}" would shadow the interface's own`);
      const run = Bun.spawnSync([BINARY, "--config", file], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", OTLP_ENDPOINT } });
      expect(run.exitCode).toBe(2);
    }
  });
});
