/**
 * Privileged e2e: dist/svc-agent as shipped. With the system libbpf and libelf hidden (a private mount
 * namespace binds an empty file over them), the binary loads its embedded copies and attaches the
 * `process` set, served by GET /status/ebpf; SIGTERM releases every program. Without capabilities the
 * agent stays up and healthy, with eBPF reported failed and why. SVC_LIBBPF_PATH and SVC_AGENT_EBPF_DEBUG
 * are honoured.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BINARY, QUIET_CONFIG } from "../../helpers";
import type { EbpfView } from "../../../src/ebpf/status";
import { expectReleased, until } from "./helpers";

const HIDDEN = ["/usr/lib/x86_64-linux-gnu/libbpf.so.1", "/usr/lib/x86_64-linux-gnu/libelf.so.1"];
const EBPF_CONFIG = QUIET_CONFIG.replace("  ebpf:\n    enabled: false\n", "  ebpf:\n    enabled: true\n");

interface Running {
  proc: ReturnType<typeof Bun.spawn>;
  url: string;
  records: Array<Record<string, unknown>>;
  dir: string;
}

/** Runs `argv` (ending in the agent binary and its args) and waits for the agent's "listening" record. */
async function run(argv: string[], dir: string, env: Record<string, string> = {}): Promise<Running> {
  const proc = Bun.spawn(argv, { stdin: "ignore", stdout: "ignore", stderr: "pipe", env: { PATH: process.env.PATH ?? "/usr/bin:/bin", TMPDIR: dir, ...env } });
  const records: Array<Record<string, unknown>> = [];
  let text = "";
  void (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of proc.stderr as ReadableStream<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = text.indexOf("\n")) !== -1) {
        const line = text.slice(0, nl);
        text = text.slice(nl + 1);
        try {
          records.push(JSON.parse(line) as Record<string, unknown>);
        } catch {
          records.push({ msg: line });
        }
      }
    }
  })();
  await until(() => records.some((r) => r.msg === "listening") || proc.exitCode !== null, "the agent to listen", 15_000);
  const listening = records.find((r) => r.msg === "listening");
  if (!listening) throw new Error(`agent exited: ${JSON.stringify(records)}`);
  return { proc, url: `http://${String(listening.address)}`, records, dir };
}

async function ebpfView(url: string): Promise<EbpfView> {
  const res = await fetch(`${url}/status/ebpf`);
  expect(res.status).toBe(200);
  return (await res.json()) as EbpfView;
}

describe("dist/svc-agent", () => {
  test("with the system libbpf hidden, the embedded copy loads and the process set attaches", async () => {
    expect(existsSync(BINARY)).toBe(true);
    const dir = mkdtempSync(join(tmpdir(), "svc-ebpf-bin-"));
    const empty = join(dir, "empty");
    const config = join(dir, "config.yaml");
    writeFileSync(empty, "");
    writeFileSync(config, EBPF_CONFIG);
    const mounts = HIDDEN.map((p) => `mount --bind ${empty} ${p}`).join(" && ");
    const agent = await run(["unshare", "-m", "--propagation", "private", "bash", "-c", `${mounts} && exec ${BINARY} --config ${config}`], dir);
    try {
      await until(() => agent.records.some((r) => r.component === "ebpf/process" && (r.msg === "eBPF program set attached" || r.state === "permanent_error")), "the process set", 15_000);
      const loaded = agent.records.find((r) => r.msg === "libbpf loaded");
      expect(loaded).toMatchObject({ source: "embedded", path: "memfd:svc-agent-libbpf.so.1", version: "1.1" });
      const view = await ebpfView(agent.url);
      expect(view.enabled).toBe(true);
      const processPrograms = view.programs.filter((p) => p.name === "handle_exec" || p.name === "handle_exit");
      expect(processPrograms.map((p) => [p.name, p.attached])).toEqual([["handle_exec", true], ["handle_exit", true]]);
      expect(processPrograms.every((p) => p.id > 0)).toBe(true);
      // Nothing extracted stays on disk: the private copies are removed once mapped.
      expect(readdirSync(dir).filter((n) => n.startsWith("svc-agent-libbpf-"))).toEqual([]);
      expect(agent.records.some((r) => r.component === "ebpf/process" && r.msg === "eBPF program set attached")).toBe(true);
      expect(agent.records.some((r) => r.component === "ebpf/process" && r.state === "permanent_error")).toBe(false);

      agent.proc.kill("SIGTERM");
      expect(await agent.proc.exited).toBe(0);
      await expectReleased(view.programs.filter((p) => p.id > 0).map((p) => p.id));
    } finally {
      if (agent.proc.exitCode === null) agent.proc.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("without capabilities the agent stays up and healthy, eBPF failed with the reason", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-ebpf-bin-"));
    const config = join(dir, "config.yaml");
    writeFileSync(config, EBPF_CONFIG);
    const agent = await run(["setpriv", "--bounding-set=-all", "--inh-caps=-all", BINARY, "--config", config], dir);
    try {
      await until(() => agent.records.some((r) => r.component === "ebpf/process" && r.state === "permanent_error"), "ebpf/process to fail", 15_000);
      const view = await ebpfView(agent.url);
      expect(view.programs.every((p) => !p.attached && p.reason?.startsWith("missing privileges"))).toBe(true);
      const ready = (await (await fetch(`${agent.url}/ready`)).json()) as { checks: Record<string, string> };
      expect(ready.checks.ebpf).toStartWith("failed: missing privileges");
      expect((await fetch(`${agent.url}/healthz`)).status).toBe(200);
      agent.proc.kill("SIGTERM");
      expect(await agent.proc.exited).toBe(0);
    } finally {
      if (agent.proc.exitCode === null) agent.proc.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("SVC_LIBBPF_PATH picks the library; SVC_AGENT_EBPF_DEBUG sends libbpf's lines to the debug log", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-ebpf-bin-"));
    const config = join(dir, "config.yaml");
    writeFileSync(config, EBPF_CONFIG);
    const system = realpathSync("/usr/lib/x86_64-linux-gnu/libbpf.so.1");
    const agent = await run([BINARY, "--config", config], dir, { SVC_LIBBPF_PATH: system, SVC_AGENT_EBPF_DEBUG: "true", SVC_LOG_LEVEL: "debug" });
    try {
      await until(() => agent.records.some((r) => r.component === "ebpf/process" && r.msg === "eBPF program set attached"), "the process set", 15_000);
      expect(agent.records.find((r) => r.msg === "libbpf loaded")).toMatchObject({ source: "override", path: system });
      expect(agent.records.some((r) => r.source === "libbpf" && r.level === "debug" && String(r.msg).includes("handle_exec"))).toBe(true);
      agent.proc.kill("SIGTERM");
      expect(await agent.proc.exited).toBe(0);
    } finally {
      if (agent.proc.exitCode === null) agent.proc.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }

    const dir2 = mkdtempSync(join(tmpdir(), "svc-ebpf-bin-"));
    writeFileSync(join(dir2, "config.yaml"), EBPF_CONFIG);
    const broken = await run([BINARY, "--config", join(dir2, "config.yaml")], dir2, { SVC_LIBBPF_PATH: "/nonexistent/libbpf.so.1" });
    try {
      await until(() => broken.records.some((r) => r.component === "ebpf/process" && r.state === "permanent_error"), "ebpf/process to fail", 15_000);
      const failed = broken.records.find((r) => r.component === "ebpf/process" && r.state === "permanent_error")!;
      expect(String(failed.reason)).toStartWith("libbpf unavailable: SVC_LIBBPF_PATH could not be loaded");
      expect((await fetch(`${broken.url}/healthz`)).status).toBe(200);
      broken.proc.kill("SIGTERM");
      expect(await broken.proc.exited).toBe(0);
    } finally {
      if (broken.proc.exitCode === null) broken.proc.kill("SIGKILL");
      rmSync(dir2, { recursive: true, force: true });
    }
  });

  test("the extraction fallback (when memory files fail) loads the embedded copies and leaves nothing on disk", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-ebpf-bin-"));
    const empty = join(dir, "empty");
    writeFileSync(empty, "");
    const mounts = HIDDEN.map((p) => `mount --bind ${empty} ${p}`).join(" && ");
    const script = join(import.meta.dir, "fixtures/load-extracted.ts");
    try {
      const r = Bun.spawnSync(["unshare", "-m", "--propagation", "private", "bash", "-c", `${mounts} && exec ${process.execPath} ${script}`], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", TMPDIR: dir } });
      expect(r.exitCode).toBe(0);
      const out = JSON.parse(r.stdout.toString()) as { version: string; path: string; left: string[]; mappedFrom: string[] };
      expect(out.version).toBe("1.1");
      expect(out.path.startsWith(join(dir, "svc-agent-libbpf-"))).toBe(true);
      expect(out.left).toEqual(["empty"]);
      expect(out.mappedFrom).toEqual([`${out.path} (deleted)`]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
