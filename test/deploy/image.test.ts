/**
 * The container image, built and run for real: deploy/container/stage-rootfs.ts stages the context from
 * dist/svc-agent, a REAL dockerd (started here, own roots and socket) builds deploy/container/Dockerfile
 * (FROM scratch: no registry is needed), and the image then runs with deploy/README.md's `docker run`, word
 * for word (only the socket, configuration, token and image names are this test's): root,
 * privileged, host PID and network, read-only root filesystem with a /tmp tmpfs, /sys/fs/bpf,
 * /sys/kernel/btf, /sys/kernel/tracing and the Docker socket (read-only) mounted, configuration mounted
 * at /etc/svc-agent/config.yaml. Checked: /healthz, /ready (with a live OTLP receiver: `svc-agent receive`
 * on loopback), eBPF programs attached (each id known to the kernel, per bpftool) and their ring buffer
 * receiving events from host processes, the container still running after that, Docker discovery
 * through the read-only socket, and the image itself: exactly the staged files, no shell, non-root default.
 * Then the DaemonSet's Pod as a kubelet would run it (test/deploy/kubelet-sim.ts): its volumes, env, args
 * and security context taken from deploy/kubernetes/svc-agent.yaml, in a Pod sandbox network namespace
 * (loopback only: no Pod network without a cluster) holding the OTLP receiver; probes run inside that
 * namespace on the named container port; a line written to a pod log file must reach the receiver.
 *
 * Where the machine's own capability bounding set lacks a capability Docker's --privileged grants (this
 * sandbox lacks CAP_SYS_RESOURCE: runc fails with "unable to apply caps"), the test runs the container
 * with the explicit set instead (--cap-add SYS_ADMIN SYS_PTRACE, seccomp and AppArmor unconfined) and says so.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { parse as parseYaml, parseAllDocuments, stringify as stringifyYaml } from "yaml";
import { dockerdUnavailable, TestDockerd, TEST_IMAGE } from "../helpers/dockerd";
import { dockerRunArgs, probePort } from "./kubelet-sim";
import { MANIFESTS_PATH } from "../../deploy/kubernetes/generate";
import { BINARY } from "../helpers/agent-process";
import { closedLoopbackPort } from "../helpers/ports";
import { IMAGE_BINARY_PATH, NONROOT_UID, stageRootfs } from "../../deploy/container/stage-rootfs";
import type { EbpfView } from "../../src/ebpf/status";
import type { DiscoveryView } from "../../src/discovery/status";

const DOCKERFILE = resolve(import.meta.dir, "../../deploy/container/Dockerfile");
const README = resolve(import.meta.dir, "../../deploy/README.md");
const IMAGE = "svc-agent:deploy-test";
type Obj = Record<string, any>;
const CONTAINER = "svc-agent-deploy-test";
const START_TIMEOUT_MS = 30_000;
const ATTACH_TIMEOUT_MS = 30_000;
const TEST_TIMEOUT_MS = 120_000;
const POLL_MS = 100;
/** The capabilities the container gets where --privileged cannot be granted (Docker 20.10 has no CAP_BPF/CAP_PERFMON names; CAP_SYS_ADMIN covers both). */
const EXPLICIT_PRIVILEGES = ["--cap-add", "SYS_ADMIN", "--cap-add", "SYS_PTRACE", "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined"];

const unavailable = dockerdUnavailable() ?? (existsSync(BINARY) ? undefined : `${BINARY} not built`);
if (unavailable) console.warn(`SKIP container image test: ${unavailable}`);


async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number, detail: () => string = () => ""): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${detail()}`);
    await Bun.sleep(POLL_MS);
  }
}

/** The words of deploy/README.md's `docker run` command (after `docker`), continuation lines joined, double quotes removed. */
function documentedDockerRun(): string[] {
  const text = readFileSync(README, "utf8");
  const start = text.indexOf("docker run -d --name svc-agent");
  if (start < 0) throw new Error("deploy/README.md has no `docker run -d --name svc-agent` command");
  let command = "";
  for (const line of text.slice(start).split("\n")) {
    command += line.replace(/\\$/, " ");
    if (!line.endsWith("\\")) break;
  }
  // A word is a run of unquoted characters and "double-quoted" parts, as the shell reads it.
  const words = [...command.matchAll(/(?:"[^"]*"|[^\s"])+/g)].map((m) => m[0].replace(/"/g, ""));
  expect(words[0]).toBe("docker");
  return words.slice(1);
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
  /** What stands for `--privileged` on this machine (set by the first run). */
  let privilegedFlags: string[] = ["--privileged"];
  /** A container's output (the agent logs to stderr, which the helper's docker() does not return). */
  const containerLogs = (name: string) => {
    const r = Bun.spawnSync(["docker", "-H", `unix://${dockerd.socket}`, "logs", name], { stdout: "pipe", stderr: "pipe" });
    return r.stdout.toString() + r.stderr.toString();
  };
  const logs = () => containerLogs(CONTAINER);

  beforeAll(async () => {
    process.env.DOCKER_BUILDKIT = "0";
    const staged = await stageRootfs(BINARY, join(dir, "context"));
    stagedFiles = filesUnder(join(staged.context, "rootfs"));
    await dockerd.start();
    dockerd.docker("build", "-q", "-f", DOCKERFILE, "-t", IMAGE, staged.context);

    const otlpPort = closedLoopbackPort();
    receiver = Bun.spawn([BINARY, "receive", "--listen", `127.0.0.1:${otlpPort}`], { stdout: "ignore", stderr: "pipe" });
    const port = closedLoopbackPort();
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
    // The `docker run` of deploy/README.md, word for word, with this test's socket, configuration, token and image.
    const readme = documentedDockerRun();
    const substitutions: Record<string, string> = {
      "svc-agent": CONTAINER,
      "/var/run/docker.sock:/var/run/docker.sock:ro": `${dockerd.socket}:/var/run/docker.sock:ro`,
      "$PWD/config.yaml:/etc/svc-agent/config.yaml:ro": `${config}:/etc/svc-agent/config.yaml:ro`,
      "API_TOKEN=$(head -c 32 /dev/urandom | base64)": "API_TOKEN=image-test-token",
      "svc-agent:0.1.0": IMAGE,
    };
    const args = readme.map((w) => substitutions[w] ?? w);
    for (const w of Object.keys(substitutions)) expect(readme).toContain(w);
    expect(args.at(-1)).toBe(IMAGE);
    try {
      dockerd.docker(...args);
      mode = "--privileged";
    } catch (e) {
      if (!String(e).includes("unable to apply caps")) throw e;
      dockerd.docker("rm", "-f", CONTAINER);
      dockerd.docker(...args.flatMap((w) => (w === "--privileged" ? EXPLICIT_PRIVILEGES : [w])));
      mode = EXPLICIT_PRIVILEGES.join(" ");
      privilegedFlags = EXPLICIT_PRIVILEGES;
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
    const port = closedLoopbackPort();
    const config = join(dir, "nonroot.yaml");
    writeFileSync(
      config,
      `self_telemetry:\n  listen: 127.0.0.1:${port}\nagent:\n  ebpf:\n    enabled: false\n  discovery:\n    detect_kubernetes: false\n    docker:\n      enabled: false\n    cloud:\n      enabled: false\n`,
    );
    const name = `${CONTAINER}-nonroot`;
    dockerd.docker("run", "-d", "--name", name, "--network=host", "--read-only", "-v", `${config}:/etc/svc-agent/config.yaml:ro`, IMAGE);
    try {
      await until("/healthz of the non-root container", () => fetch(`http://127.0.0.1:${port}/healthz`).then((r) => (r.ok ? true : undefined), () => undefined), START_TIMEOUT_MS, () => containerLogs(name));
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
    expect(ready.checks).toEqual({ ebpf: "ok", otlp: "ok", discovery: "ok", memory: "ok" });
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

  test("`docker kill -s HUP` (the README's reload) reloads the mounted configuration and the agent stays up", async () => {
    dockerd.docker("kill", "-s", "HUP", CONTAINER);
    await until("the reload record", async () => (logs().includes('"msg":"configuration reloaded"') ? true : undefined), START_TIMEOUT_MS, logs);
    expect(dockerd.docker("inspect", "-f", "{{.State.Running}} {{.RestartCount}}", CONTAINER)).toBe("true 0");
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
  }, TEST_TIMEOUT_MS);

  describe("as a kubelet runs the DaemonSet's Pod (deploy/kubernetes/svc-agent.yaml)", () => {
    const POD = "svc-agent-x7k2p";
    const NODE = "node-1";
    const TOKEN = "daemonset-sim-token";
    const LOG_LINE = `hello from a pod ${Date.now()}`;
    const sandbox = `${CONTAINER}-pod-sandbox`;
    const agentName = `${CONTAINER}-pod-agent`;
    const objs = parseAllDocuments(readFileSync(MANIFESTS_PATH, "utf8")).map((d) => d.toJS() as Obj).filter(Boolean);
    const ds = objs.find((o) => o.kind === "DaemonSet")!;
    const podSpec = ds.spec.template.spec as Obj;
    const c = podSpec.containers[0] as Obj;
    const simDir = join(dir, "pod");
    const logsDir = join(simDir, "node-var-log");
    const stateDir = join(simDir, "node-var-lib-svc-agent");
    const podLogDir = join(logsDir, "pods", `svc-shop_web-1_1234`, "app");
    const otlpOut = join(simDir, "otlp.jsonl");
    let podReceiver: ReturnType<typeof Bun.spawn> | undefined;
    let netns = "";

    /** Runs an HTTP GET from inside the Pod's network namespace (where the kubelet's probes land); returns status and body. */
    const inPod = (path: string, port = probePort(c, "http"), headers: string[] = []) => {
      const r = Bun.spawnSync(["nsenter", `--net=${netns}`, "curl", "-s", "-m", "5", ...headers.flatMap((h) => ["-H", h]), "-w", "\\n%{http_code}", `http://127.0.0.1:${port}${path}`], { stdout: "pipe", stderr: "pipe" });
      const out = r.stdout.toString();
      const nl = out.lastIndexOf("\n");
      return { status: Number(out.slice(nl + 1)), body: out.slice(0, nl) };
    };
    const podLogs = () => containerLogs(agentName);

    beforeAll(async () => {
      mkdirSync(podLogDir, { recursive: true });
      mkdirSync(join(logsDir, "containers"), { recursive: true });
      writeFileSync(join(podLogDir, "0.log"), "");
      symlinkSync("/var/log/pods/svc-shop_web-1_1234/app/0.log", join(logsDir, "containers", `web-1_svc-shop_app-${"a".repeat(64)}.log`));
      // The ConfigMap as shipped, except what needs a cluster: the OTLP backend is a receiver in the Pod's own
      // network namespace, and no API server or cloud metadata is reachable from it (rbac.test.ts covers discovery).
      const cm = objs.find((o) => o.kind === "ConfigMap")!;
      const config = parseYaml(cm.data["config.yaml"]) as Obj;
      config.otlp.endpoint = "127.0.0.1:4317";
      config.agent.discovery.detect_kubernetes = false;
      config.agent.discovery.cloud.enabled = false;

      // The Pod sandbox ("pause" container): a network namespace with only loopback, which the agent joins.
      dockerd.importImage();
      dockerd.docker("run", "-d", "--name", sandbox, "--network", "none", "--stop-signal", "KILL", TEST_IMAGE, "/bin/sleep", "600");
      netns = `/proc/${dockerd.docker("inspect", "-f", "{{.State.Pid}}", sandbox)}/ns/net`;
      podReceiver = Bun.spawn(["nsenter", `--net=${netns}`, BINARY, "receive", "--listen", "127.0.0.1:4317", "--output", otlpOut], { stdout: "pipe", stderr: "pipe" });

      const args = dockerRunArgs(podSpec, {
        workDir: simDir,
        nodeName: NODE,
        secrets: { [c.env.find((e: Obj) => e.name === "API_TOKEN").valueFrom.secretKeyRef.name]: { "api-token": TOKEN } },
        configMaps: { [cm.metadata.name]: { "config.yaml": stringifyYaml(config) } },
        hostPathRedirects: { "/var/log/pods": join(logsDir, "pods"), "/var/log/containers": join(logsDir, "containers"), "/var/lib/svc-agent": stateDir },
        privilegedFlags,
      }).map((a) => (a === "--network=none" ? `--network=container:${sandbox}` : a));
      const image = dockerd.docker("image", "inspect", "-f", "{{.Id}}", IMAGE);
      expect(c.image).toMatch(/^"?svc-agent:/);
      dockerd.docker("run", "-d", "--name", agentName, ...args, image, ...(c.args as string[]));
    }, TEST_TIMEOUT_MS);

    afterAll(() => {
      podReceiver?.kill();
    });

    test("liveness and readiness probes pass on the container port, the scrape needs no token, /status needs the Secret's", async () => {
      const live = await until("the liveness probe", async () => (inPod(c.livenessProbe.httpGet.path).status === 200 ? true : undefined), START_TIMEOUT_MS, podLogs);
      expect(live).toBe(true);
      const ready = await until(
        "the readiness probe",
        async () => {
          const r = inPod(c.readinessProbe.httpGet.path);
          return r.status === 200 ? r.body : undefined;
        },
        START_TIMEOUT_MS,
        () => `${inPod(c.readinessProbe.httpGet.path).body}\n${podLogs()}`,
      );
      expect(JSON.parse(ready)).toEqual({ status: "ready", checks: { ebpf: "ok", otlp: "ok", discovery: "ok", memory: "ok" } });
      const annotations = ds.spec.template.metadata.annotations as Record<string, string>;
      const metrics = inPod(annotations["prometheus.io/path"] ?? "", Number(annotations["prometheus.io/port"]));
      expect(metrics.status).toBe(200);
      expect(metrics.body).toContain("svc_");
      expect(inPod("/status").status).toBe(401);
      expect(inPod("/status", undefined, [`Authorization: Bearer ${TOKEN}`]).status).toBe(200);
    }, TEST_TIMEOUT_MS);

    test("with the read-only root filesystem: eBPF attached (libbpf through the /tmp emptyDir), pod logs tailed and exported, read positions kept in the state hostPath", async () => {
      const ebpf = JSON.parse(inPod("/status/ebpf", undefined, [`Authorization: Bearer ${TOKEN}`]).body) as EbpfView;
      expect(ebpf.programs.some((p) => p.attached)).toBe(true);
      appendFileSync(join(podLogDir, "0.log"), `${new Date().toISOString()} stdout F ${LOG_LINE}\n`);
      await until(
        "the pod's log line at the OTLP receiver",
        async () => (existsSync(otlpOut) && readFileSync(otlpOut, "utf8").split("\n").some((l) => l.includes('"signal":"logs"') && l.includes(LOG_LINE)) ? true : undefined),
        START_TIMEOUT_MS,
        podLogs,
      );
      await until("the log checkpoint in the state hostPath", async () => (existsSync(join(stateDir, "logs-checkpoint.json")) ? true : undefined), START_TIMEOUT_MS, podLogs);
      expect(dockerd.docker("inspect", "-f", "{{.State.Running}} {{.RestartCount}}", agentName)).toBe("true 0");
    }, TEST_TIMEOUT_MS);
  });
});
