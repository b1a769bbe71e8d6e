/**
 * The container image, built and run for real: deploy/container/stage-rootfs.ts stages the context from
 * dist/svc-agent, a REAL dockerd (started here, own roots and socket) builds deploy/container/Dockerfile
 * (FROM scratch: no registry is needed), and the image then runs as documented in deploy/README.md: root,
 * privileged, host PID and network, read-only root filesystem with a /tmp tmpfs, /sys/fs/bpf,
 * /sys/kernel/btf, /sys/kernel/tracing and the Docker socket (read-only) mounted, configuration mounted
 * at /etc/svc-agent/config.yaml. Checked: /healthz, /ready (with a live OTLP receiver: `svc-agent receive`
 * on loopback), eBPF programs attached (each id known to the kernel, per bpftool) and their ring buffer
 * receiving events from host processes, the container still running after that, Docker discovery
 * through the read-only socket, and the image itself: exactly the staged files, no shell, non-root default.
 *
 * Where the machine's own capability bounding set lacks a capability Docker's --privileged grants (this
 * sandbox lacks CAP_SYS_RESOURCE: runc fails with "unable to apply caps"), the test runs the container
 * with the explicit set instead (--cap-add SYS_ADMIN SYS_PTRACE, seccomp and AppArmor unconfined) and says so.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { dockerdUnavailable, TestDockerd } from "../helpers/dockerd";
import { BINARY } from "../helpers/agent-process";
import { IMAGE_BINARY_PATH, NONROOT_UID, stageRootfs } from "../../deploy/container/stage-rootfs";
import type { EbpfView, DiscoveryView } from "../../src/status/model";

const DOCKERFILE = resolve(import.meta.dir, "../../deploy/container/Dockerfile");
const IMAGE = "svc-agent:deploy-test";
const CONTAINER = "svc-agent-deploy-test";
const START_TIMEOUT_MS = 30_000;
const ATTACH_TIMEOUT_MS = 30_000;
const TEST_TIMEOUT_MS = 120_000;
const POLL_MS = 100;
/** The capabilities the container gets where --privileged cannot be granted (Docker 20.10 has no CAP_BPF/CAP_PERFMON names; CAP_SYS_ADMIN covers both). */
const EXPLICIT_PRIVILEGES = ["--cap-add", "SYS_ADMIN", "--cap-add", "SYS_PTRACE", "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined"];

const unavailable = dockerdUnavailable() ?? (existsSync(BINARY) ? undefined : `${BINARY} not built`);
if (unavailable) console.warn(`SKIP container image test: ${unavailable}`);

async function freePort(): Promise<number> {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number, detail: () => string = () => ""): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${detail()}`);
    await Bun.sleep(POLL_MS);
  }
}

function filesUnder(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else out.push(`/${relative(root, p)}`);
    }
  };
  walk(root);
  return out.sort();
}

describe.skipIf(unavailable !== undefined)("container image (real dockerd)", () => {
  const dockerd = new TestDockerd();
  const dir = mkdtempSync(join(tmpdir(), "svc-deploy-image-"));
  let receiver: ReturnType<typeof Bun.spawn> | undefined;
  let base = "";
  let stagedFiles: string[] = [];
  let mode = "";
  const logs = () => {
    try {
      return dockerd.docker("logs", CONTAINER);
    } catch (e) {
      return String(e);
    }
  };

  beforeAll(async () => {
    process.env.DOCKER_BUILDKIT = "0";
    const staged = await stageRootfs(BINARY, join(dir, "context"));
    stagedFiles = filesUnder(join(staged.context, "rootfs"));
    await dockerd.start();
    dockerd.docker("build", "-q", "-f", DOCKERFILE, "-t", IMAGE, staged.context);

    const otlpPort = await freePort();
    receiver = Bun.spawn([BINARY, "receive", "--listen", `127.0.0.1:${otlpPort}`], { stdout: "ignore", stderr: "pipe" });
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    const config = join(dir, "config.yaml");
    writeFileSync(
      config,
      `self_telemetry:
  listen: 127.0.0.1:${port}
otlp:
  endpoint: 127.0.0.1:${otlpPort}
agent:
  ebpf:
    enabled: true
  logs:
    enabled: false
  discovery:
    detect_kubernetes: false
    docker:
      enabled: true
      socket: /var/run/docker.sock
    cloud:
      enabled: false
`,
    );
    const common = [
      "run", "-d", "--name", CONTAINER, "--user", "0:0", "--pid=host", "--network=host",
      "--read-only", "--tmpfs", "/tmp:rw,exec,nosuid,size=64m",
      "-v", "/sys/fs/bpf:/sys/fs/bpf",
      "-v", "/sys/kernel/btf:/sys/kernel/btf:ro",
      "-v", "/sys/kernel/tracing:/sys/kernel/tracing:ro",
      "-v", `${dockerd.socket}:/var/run/docker.sock:ro`,
      "-v", `${config}:/etc/svc-agent/config.yaml:ro`,
    ];
    try {
      dockerd.docker(...common.slice(0, 1), "--privileged", ...common.slice(1), IMAGE);
      mode = "--privileged";
    } catch (e) {
      if (!String(e).includes("unable to apply caps")) throw e;
      dockerd.docker("rm", "-f", CONTAINER);
      dockerd.docker(...common.slice(0, 1), ...EXPLICIT_PRIVILEGES, ...common.slice(1), IMAGE);
      mode = EXPLICIT_PRIVILEGES.join(" ");
      console.warn(`container image test: --privileged cannot be granted on this machine (its bounding set lacks a capability); ran with ${mode}`);
    }
    await until("/healthz of the container", () => fetch(`${base}/healthz`).then((r) => (r.ok ? true : undefined), () => undefined), START_TIMEOUT_MS, logs);
  }, TEST_TIMEOUT_MS);

  afterAll(async () => {
    receiver?.kill();
    await dockerd.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("the image holds exactly the staged files, no shell, and runs as non-root by default", () => {
    const user = dockerd.docker("image", "inspect", "-f", "{{.Config.User}}|{{json .Config.Entrypoint}}|{{json .Config.ExposedPorts}}", IMAGE);
    expect(user).toBe(`${NONROOT_UID}:${NONROOT_UID}|["${IMAGE_BINARY_PATH}"]|{"19090/tcp":{}}`);
    const id = dockerd.docker("create", IMAGE);
    const tar = Bun.spawnSync(["sh", "-c", `docker -H unix://${dockerd.socket} export ${id} | tar -t`], { stdout: "pipe" });
    dockerd.docker("rm", id);
    const exported = tar.stdout
      .toString()
      .split("\n")
      .filter((l) => l && !l.endsWith("/"))
      .map((l) => `/${l}`)
      // docker adds these mount points and empty files to every container's filesystem
      .filter((l) => !["/.dockerenv", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/etc/mtab"].includes(l) && !l.startsWith("/proc/") && !l.startsWith("/sys/") && !l.startsWith("/dev/"))
      .sort();
    expect(exported).toEqual(stagedFiles);
    expect(stagedFiles.some((f) => /\/(sh|bash|busybox|apt|apt-get|dpkg)$/.test(f))).toBe(false);
    expect(() => dockerd.docker("run", "--rm", "--network=none", "--entrypoint", "/bin/sh", IMAGE, "-c", "true")).toThrow();
    expect(statSync(join(dir, "context/rootfs/tmp")).mode & 0o7777).toBe(0o1777);
  });

  test("as the default non-root user without privileges, the image serves the HTTP interface (eBPF off)", async () => {
    const port = await freePort();
    const config = join(dir, "nonroot.yaml");
    writeFileSync(
      config,
      `self_telemetry:\n  listen: 127.0.0.1:${port}\nagent:\n  ebpf:\n    enabled: false\n  discovery:\n    detect_kubernetes: false\n    docker:\n      enabled: false\n    cloud:\n      enabled: false\n`,
    );
    const name = `${CONTAINER}-nonroot`;
    dockerd.docker("run", "-d", "--name", name, "--network=host", "--read-only", "-v", `${config}:/etc/svc-agent/config.yaml:ro`, IMAGE);
    try {
      await until("/healthz of the non-root container", () => fetch(`http://127.0.0.1:${port}/healthz`).then((r) => (r.ok ? true : undefined), () => undefined), START_TIMEOUT_MS, () => {
        try {
          return dockerd.docker("logs", name);
        } catch (e) {
          return String(e);
        }
      });
      const pid = dockerd.docker("inspect", "-f", "{{.State.Pid}}", name);
      expect(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]).toBe(String(NONROOT_UID));
    } finally {
      dockerd.docker("rm", "-f", name);
    }
  }, TEST_TIMEOUT_MS);

  test("/healthz and /ready answer from the container (OTLP receiver live, Docker socket read-only)", async () => {
    const health = await fetch(`${base}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: "ok" });
    const ready = await until(
      "/ready to be ready",
      async () => {
        const r = await fetch(`${base}/ready`);
        const body = (await r.json()) as { status: string; checks: Record<string, string> };
        return r.status === 200 && body.status === "ready" ? body : undefined;
      },
      START_TIMEOUT_MS,
      () => logs(),
    );
    expect(ready.checks).toEqual({ ebpf: "ok", otlp: "ok", discovery: "ok" });
    const discovery = (await (await fetch(`${base}/status/discovery`)).json()) as DiscoveryView;
    expect(discovery.docker.connected).toBe(true);
    // The agent sees its own container through the read-only socket.
    expect(discovery.docker.containers).toBeGreaterThanOrEqual(1);
  }, TEST_TIMEOUT_MS);

  test("eBPF programs are attached, and the kernel knows their ids", async () => {
    const view = await until(
      "GET /status/ebpf to list attached programs",
      async () => {
        const r = await fetch(`${base}/status/ebpf`);
        if (!r.ok) return undefined;
        const v = (await r.json()) as EbpfView;
        return v.programs.some((p) => p.attached) ? v : undefined;
      },
      ATTACH_TIMEOUT_MS,
      () => logs(),
    );
    expect(view.enabled).toBe(true);
    const attached = view.programs.filter((p) => p.attached);
    expect(attached.length).toBeGreaterThan(0);
    for (const p of attached) {
      const r = Bun.spawnSync(["bpftool", "prog", "show", "id", String(p.id)], { stdout: "pipe", stderr: "pipe" });
      expect({ program: p.name, bpftool: r.exitCode }).toEqual({ program: p.name, bpftool: 0 });
    }
    // Events flow from the kernel into the containerised agent: host processes started now are seen (host PID namespace).
    const received = await until(
      "ring buffer events from host processes",
      async () => {
        Bun.spawnSync(["true"]);
        const v = (await (await fetch(`${base}/status/ebpf`)).json()) as EbpfView;
        return v.ringbuf.events_received > 0 ? v.ringbuf.events_received : undefined;
      },
      ATTACH_TIMEOUT_MS,
      () => logs(),
    );
    console.log(`container image: ${attached.length}/${view.programs.length} eBPF programs attached, ${received} ring buffer events received (run with ${mode})`);
    expect(dockerd.docker("inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", CONTAINER)).toBe("true 0");
  }, TEST_TIMEOUT_MS);
});
