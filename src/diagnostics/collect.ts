/**
 * Gathers the diagnostics bundle's files: the sanitized configuration, what the running agent answers on its
 * configured address (status views, metrics, eBPF programs and maps, recent logs; runtime variables in debug mode), else the eBPF
 * objects the kernel lists, and kernel facts. Whatever cannot be collected is listed with the reason. Every file
 * is scrubbed of the configuration's secret values before it is returned.
 */
import { existsSync, readdirSync, readFileSync, readlinkSync, statSync } from "node:fs";
import os from "node:os";
import { REDACTED, SCRUB_MIN_LENGTH, redactConfig, scrubText, secretsOf } from "../config/secrets";
import { loadConfig, resolveConfigPath } from "../config/load";
import { retryAfterMs } from "../export/retry-after";
import type { Config } from "../config/schema";
import { formatAddress, parseListen } from "../server/listen";
import { BUILD_INFO } from "../version";

/** Bound on each request to the running agent. */
export const AGENT_TIMEOUT_MS = 3000;
/** Bound on each external command (bpftool, uname). */
const COMMAND_TIMEOUT_MS = 5000;

/** Linux capability numbers (include/uapi/linux/capability.h). */
const CAPABILITIES = [
  "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap", "linux_immutable",
  "net_bind_service", "net_broadcast", "net_admin", "net_raw", "ipc_lock", "ipc_owner", "sys_module", "sys_rawio", "sys_chroot",
  "sys_ptrace", "sys_pacct", "sys_admin", "sys_boot", "sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod", "lease",
  "audit_write", "audit_control", "setfcap", "mac_override", "mac_admin", "syslog", "wake_alarm", "block_suspend", "audit_read",
  "perfmon", "bpf", "checkpoint_restore",
];

/** Endpoints of the running agent saved in the bundle, with their file names. */
const AGENT_ENDPOINTS: Array<{ path: string; file: string; what: string }> = [
  { path: "/healthz", file: "agent/healthz.json", what: "liveness answer" },
  { path: "/ready", file: "agent/ready.json", what: "readiness answer" },
  { path: "/status", file: "agent/status.json", what: "status answer" },
  { path: "/status/ebpf", file: "agent/status-ebpf.json", what: "eBPF programs and maps (from the agent)" },
  { path: "/status/export", file: "agent/status-export.json", what: "export status answer" },
  { path: "/status/discovery", file: "agent/status-discovery.json", what: "discovery status answer" },
  { path: "/config", file: "agent/config.json", what: "the running agent's sanitized configuration" },
  { path: "/debug/vars", file: "agent/vars.json", what: "runtime variables (debug mode only)" },
  { path: "/admin/logs", file: "agent/logs.json", what: "recent log records of the agent (secrets scrubbed)" },
];

export interface BundleFile {
  name: string;
  data: string;
  description: string;
}

export interface Missing {
  item: string;
  reason: string;
}

export interface Bundle {
  files: BundleFile[];
  missing: Missing[];
  manifest: Record<string, unknown>;
}

export interface CollectOptions {
  configPath: string | undefined;
  env: Record<string, string | undefined>;
  /** Overrides the agent address (tests); default from self_telemetry.listen. */
  agentUrl?: string;
}

const json = (v: unknown) => JSON.stringify(v, null, 2) + "\n";

export async function collectBundle(options: CollectOptions): Promise<Bundle> {
  const files: BundleFile[] = [];
  const missing: Missing[] = [];
  const add = (name: string, data: string, description: string) => files.push({ name, data, description });

  // Configuration: the file the agent would use; embedded defaults when it cannot be read (to know where to look).
  let config: Config | undefined;
  let configSource = "embedded defaults";
  const path = resolveConfigPath(options.configPath, options.env);
  try {
    const loaded = loadConfig(path, options.env);
    config = loaded.config;
    configSource = loaded.source;
    add("config.json", json(redactConfig(config)), `configuration from ${loaded.source}, secrets replaced by ${REDACTED}`);
  } catch (e) {
    missing.push({ item: "config.json", reason: `configuration ${path ?? "(embedded defaults)"} could not be loaded: ${(e as Error).message}` });
    try {
      config = loadConfig(undefined, options.env).config;
    } catch {
      config = undefined;
    }
  }

  // The running agent.
  const agentUrl = options.agentUrl ?? (config ? agentUrlOf(config) : undefined);
  const headers: Record<string, string> = {};
  if (config?.self_telemetry.auth.enabled && config.self_telemetry.auth.bearer_token) headers.authorization = `Bearer ${config.self_telemetry.auth.bearer_token}`;
  let agentAnswered = false;
  let agentProblem = !config
    ? "no configuration to find the agent's address"
    : !config.self_telemetry.enabled
      ? "self_telemetry.enabled is false: the agent serves no HTTP interface"
      : `self_telemetry.listen is ${config.self_telemetry.listen}: port 0 is chosen at start, so the agent's address is not known from the configuration`;
  if (agentUrl) {
    const probe = await get(`${agentUrl}/healthz`, headers);
    agentAnswered = probe.ok || probe.status !== undefined;
    agentProblem = probe.ok || probe.status !== undefined ? "" : `no agent answered at ${agentUrl}: ${probe.error}`;
  }
  if (agentAnswered && agentUrl) {
    for (const ep of AGENT_ENDPOINTS) {
      const r = await get(`${agentUrl}${ep.path}`, headers);
      if (r.status !== undefined && (r.status < 400 || ep.path === "/ready" || ep.path === "/healthz")) add(ep.file, r.body!, `${ep.what}: GET ${ep.path} answered ${r.status}`);
      else missing.push({ item: ep.file, reason: r.status !== undefined ? `GET ${ep.path} answered ${r.status}${hint(ep.path, r.status)}` : `GET ${ep.path} failed: ${r.error}` });
    }
    const metricsPath = config?.self_telemetry.path ?? "/metrics";
    const m = await get(`${agentUrl}${metricsPath}`, headers);
    if (m.status === 200) add("metrics.txt", m.body!, `metrics snapshot: GET ${metricsPath} (Prometheus text format)`);
    else missing.push({ item: "metrics.txt", reason: m.status !== undefined ? `GET ${metricsPath} answered ${m.status}${hint(metricsPath, m.status)}` : `GET ${metricsPath} failed: ${m.error}` });
  } else {
    for (const item of ["metrics.txt", "agent/status*.json", "agent/logs.json"]) missing.push({ item, reason: agentProblem });
  }

  // eBPF programs and maps: the agent's view when it answered, else the kernel's.
  if (!files.some((f) => f.name === "agent/status-ebpf.json")) {
    for (const what of ["prog", "map"] as const) {
      const name = what === "prog" ? "ebpf/programs.json" : "ebpf/maps.json";
      const r = await run(["bpftool", what, "list", "-j"]);
      if (r.code === 0) add(name, r.stdout.endsWith("\n") ? r.stdout : r.stdout + "\n", `every eBPF ${what === "prog" ? "program" : "map"} loaded in the kernel (bpftool ${what} list -j), asked directly because no agent answered`);
      else missing.push({ item: name, reason: `bpftool ${what} list -j: ${r.error ?? `exit ${r.code}: ${r.stderr.trim()}`}` });
    }
  }

  const agentPid = agentAnswered && agentUrl ? listenerPid(Number(new URL(agentUrl).port)) : undefined;
  add(
    "kernel.json",
    json(await kernelInfo(agentPid)),
    `kernel and host facts: uname, /proc/version, BTF, bpffs, capabilities and memlock of this process${agentPid ? ` and of the agent (pid ${agentPid})` : ""}`,
  );

  // Scrub: no secret value of the configuration leaves in any file, whatever produced it.
  const secrets = config ? secretsOf(config).filter((s) => s.length >= SCRUB_MIN_LENGTH) : [];
  for (const f of files) f.data = scrubText(f.data, secrets);

  const manifest = {
    created: new Date().toISOString(),
    tool: { name: "svc-agent diagnostics", version: BUILD_INFO.version, commit: BUILD_INFO.commit },
    config_source: configSource,
    agent: { url: agentUrl ?? null, answered: agentAnswered, auth: Boolean(headers.authorization), problem: agentProblem || null },
    files: [{ name: "manifest.json", bytes: null, description: "this list" }, ...files.map((f) => ({ name: f.name, bytes: Buffer.byteLength(f.data), description: f.description }))],
    not_collected: missing,
  };
  return { files, missing, manifest };
}

function hint(path: string, status: number): string {
  if (status === 404 && path.startsWith("/debug/")) return " (the agent is not in debug mode: start it with --debug for this)";
  if (status === 401) return " (the token in the configuration was refused)";
  if (status === 403) return " (the configured token may not read /debug or /admin)";
  return "";
}

/** http://host:port of the agent from self_telemetry.listen (every-address binds are reached on loopback). */
export function agentUrlOf(config: Config): string | undefined {
  if (!config.self_telemetry.enabled) return undefined;
  const { hostname, port } = parseListen(config.self_telemetry.listen);
  if (port === 0) return undefined;
  const host = hostname === "0.0.0.0" ? "127.0.0.1" : hostname === "::" ? "::1" : hostname;
  return `http://${formatAddress(host, port)}`;
}

/** Tries of one request the agent's rate limit refuses (429): the bundle's dozen requests exceed a small limit. */
const RATE_LIMITED_TRIES = 4;
/** Longest wait honoured from a 429's Retry-After. */
const MAX_RETRY_AFTER_MS = 5000;

/** One GET of the running agent; a 429 is tried again after its Retry-After (seconds or an HTTP date; 1 s when absent or malformed), a few times. */
async function get(url: string, headers: Record<string, string>): Promise<{ ok: boolean; status?: number; body?: string; error?: string }> {
  for (let n = 1; ; n++) {
    try {
      const r = await fetch(url, { headers, signal: AbortSignal.timeout(AGENT_TIMEOUT_MS) });
      const body = await r.text();
      if (r.status !== 429 || n >= RATE_LIMITED_TRIES) return { ok: r.ok, status: r.status, body };
      await Bun.sleep(Math.min(retryAfterMs(r.headers.get("retry-after")) ?? 1000, MAX_RETRY_AFTER_MS));
    } catch (e) {
      return { ok: false, error: (e as Error).message };
    }
  }
}

async function run(cmd: string[]): Promise<{ code: number; stdout: string; stderr: string; error?: string }> {
  try {
    const p = Bun.spawn(cmd, { stdout: "pipe", stderr: "pipe", stdin: "ignore", timeout: COMMAND_TIMEOUT_MS });
    const [stdout, stderr] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text()]);
    return { code: await p.exited, stdout, stderr };
  } catch (e) {
    return { code: -1, stdout: "", stderr: "", error: `${cmd[0]} could not be run: ${(e as Error).message}` };
  }
}

function readText(path: string): string | null {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return null;
  }
}

/** The pid of the process listening on TCP `port` (from /proc/net/tcp{,6} and the processes' socket fds), if visible. */
export function listenerPid(port: number): number | undefined {
  const inodes = new Set<string>();
  const hexPort = port.toString(16).toUpperCase().padStart(4, "0");
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    for (const line of (readText(table) ?? "").split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      // f[1] local address:port, f[3] state (0A = LISTEN), f[9] inode
      if (f.length > 9 && f[1]!.endsWith(`:${hexPort}`) && f[3] === "0A") inodes.add(f[9]!);
    }
  }
  if (inodes.size === 0) return undefined;
  for (const pid of readdirSafe("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    for (const fd of readdirSafe(`/proc/${pid}/fd`)) {
      let link = "";
      try {
        link = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(link);
      if (m && inodes.has(m[1]!)) return Number(pid);
    }
  }
  return undefined;
}

function readdirSafe(path: string): string[] {
  try {
    return readdirSync(path);
  } catch {
    return [];
  }
}

/** Capability sets and memlock limit of a process (`self` or a pid). */
function processFacts(pid: number | "self"): Record<string, unknown> {
  const status = readText(`/proc/${pid}/status`) ?? "";
  const caps: Record<string, { hex: string; names: string[] }> = {};
  for (const key of ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]) {
    const m = new RegExp(`^${key}:\\s*([0-9a-f]+)`, "m").exec(status);
    if (!m) continue;
    const v = BigInt(`0x${m[1]}`);
    caps[key] = { hex: m[1]!, names: CAPABILITIES.filter((_, i) => (v >> BigInt(i)) & 1n).map((n) => `cap_${n}`) };
  }
  const memlock = /^Max locked memory\s+(\S+)\s+(\S+)\s+(\S+)/m.exec(readText(`/proc/${pid}/limits`) ?? "");
  return { pid: pid === "self" ? process.pid : pid, capabilities: caps, memlock: memlock ? { soft: memlock[1], hard: memlock[2], unit: memlock[3] } : null };
}

/** Kernel facts the eBPF side depends on; with `agentPid`, the agent process' capabilities and memlock too. */
export async function kernelInfo(agentPid?: number): Promise<Record<string, unknown>> {
  const mounts = readText("/proc/mounts") ?? "";
  const mountOf = (type: string) => mounts.split("\n").filter((l) => l.split(" ")[2] === type).map((l) => l.split(" ")[1]);
  const btfPath = "/sys/kernel/btf/vmlinux";
  const uname = await run(["uname", "-a"]);
  const sysctl = (name: string) => readText(`/proc/sys/${name.replaceAll(".", "/")}`)?.trim() ?? null;
  return {
    uname: { sysname: os.type(), release: os.release(), version: os.version(), machine: os.machine(), hostname: os.hostname(), text: uname.code === 0 ? uname.stdout.trim() : null },
    proc_version: readText("/proc/version")?.trim() ?? null,
    btf: { path: btfPath, present: existsSync(btfPath), bytes: existsSync(btfPath) ? statSync(btfPath).size : 0 },
    bpffs: { mounted: mountOf("bpf").length > 0, mount_points: mountOf("bpf") },
    tracefs: { mounted: mountOf("tracefs").length > 0, mount_points: mountOf("tracefs") },
    diagnostics_process: processFacts("self"),
    agent_process: agentPid ? processFacts(agentPid) : null,
    sysctl: {
      "kernel.unprivileged_bpf_disabled": sysctl("kernel.unprivileged_bpf_disabled"),
      "kernel.perf_event_paranoid": sysctl("kernel.perf_event_paranoid"),
      "net.core.bpf_jit_enable": sysctl("net.core.bpf_jit_enable"),
    },
    cpus: os.cpus().length,
    memory_bytes: os.totalmem(),
  };
}
