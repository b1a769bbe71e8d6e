/**
 * A real dockerd for privileged discovery tests, started by the test in a temporary directory (own socket,
 * data root, exec root, pid file; no iptables, no bridge) with a local image made by `docker import` of a
 * busybox-static rootfs (no registry is reachable). Containers run with `--network none`.
 * `stop()` removes the containers, stops dockerd and deletes the directory.
 */
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";

export const TEST_IMAGE = "svc-busybox:test";
const START_TIMEOUT_MS = 30_000;

/** Why dockerd cannot run here, or undefined when it can (binaries present, root). */
export function dockerdUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return "not root";
  for (const bin of ["dockerd", "docker", "containerd", "runc"]) if (!Bun.which(bin)) return `${bin} not installed`;
  if (!existsSync("/bin/busybox")) return "busybox-static not installed";
  return undefined;
}

async function until(what: string, pred: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(50);
  }
}

/** Lazily unmounts whatever is still mounted under `dir` (left by a dockerd that did not stop cleanly), deepest first. */
function unmountUnder(dir: string): void {
  const mounts = readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((l) => l.split(" ")[4] ?? "")
    .filter((m) => m.startsWith(dir + "/"))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) Bun.spawnSync(["umount", "-l", m]);
}

export class TestDockerd {
  readonly dir: string;
  readonly socket: string;
  #proc: Subprocess | undefined;

  constructor() {
    this.dir = mkdtempSync("/tmp/svc-dkr-");
    this.socket = join(this.dir, "d.sock");
  }

  /** Starts dockerd and waits until its API answers. */
  async start(): Promise<void> {
    mkdirSync(join(this.dir, "data"), { recursive: true });
    mkdirSync(join(this.dir, "exec"), { recursive: true });
    this.#proc = Bun.spawn(
      [
        "dockerd",
        "--storage-driver=overlay2",
        "--iptables=false",
        "--ip6tables=false",
        "--bridge=none",
        "--ip-masq=false",
        `--data-root=${join(this.dir, "data")}`,
        `--exec-root=${join(this.dir, "exec")}`,
        `--host=unix://${this.socket}`,
        `--pidfile=${join(this.dir, "d.pid")}`,
      ],
      { stdout: Bun.file(join(this.dir, "dockerd.log")), stderr: Bun.file(join(this.dir, "dockerd.err")) },
    );
    await until("dockerd API", async () => {
      if (this.#proc?.exitCode !== null) throw new Error(`dockerd exited: ${this.log().slice(-2000)}`);
      try {
        const r = await fetch("http://docker/_ping", { unix: this.socket } as RequestInit);
        return r.ok;
      } catch {
        return false;
      }
    }, START_TIMEOUT_MS);
  }

  /** The end of dockerd's log (for failure messages). */
  log(): string {
    try {
      return readFileSync(join(this.dir, "dockerd.err"), "utf8");
    } catch {
      return "";
    }
  }

  /** Runs the docker CLI against this daemon; throws on a non-zero exit. */
  docker(...args: string[]): string {
    const r = Bun.spawnSync(["docker", "-H", `unix://${this.socket}`, ...args], { stdout: "pipe", stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`docker ${args.join(" ")}: ${r.stderr.toString()}`);
    return r.stdout.toString().trim();
  }

  /** Imports the busybox-static rootfs as TEST_IMAGE. */
  importImage(): void {
    const root = join(this.dir, "rootfs");
    mkdirSync(join(root, "bin"), { recursive: true });
    cpSync("/bin/busybox", join(root, "bin/busybox"));
    for (const tool of ["sh", "sleep"]) symlinkSync("busybox", join(root, "bin", tool));
    const tar = Bun.spawnSync(["tar", "-C", root, "-c", "."], { stdout: "pipe" });
    const r = Bun.spawnSync(["docker", "-H", `unix://${this.socket}`, "import", "-", TEST_IMAGE], { stdin: tar.stdout, stdout: "pipe", stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`docker import: ${r.stderr.toString()}`);
  }

  /** Starts a sleeping container with --network none; returns its full id. */
  run(name: string, labels: Record<string, string> = {}): string {
    const l = Object.entries(labels).flatMap(([k, v]) => ["--label", `${k}=${v}`]);
    return this.docker("run", "-d", "--network", "none", "--stop-signal", "KILL", "--name", name, ...l, TEST_IMAGE, "/bin/sleep", "600");
  }

  /** Stops dockerd (SIGTERM) and waits for it to exit; it stops its containers first (they run with --stop-signal KILL, so that is quick). */
  async kill(): Promise<void> {
    const p = this.#proc;
    this.#proc = undefined;
    if (!p) return;
    p.kill("SIGTERM");
    await p.exited;
  }

  /** Removes every container, stops dockerd and deletes the directory. Safe to call twice. */
  async stop(): Promise<void> {
    if (this.#proc) {
      try {
        const ids = this.docker("ps", "-aq").split("\n").filter(Boolean);
        if (ids.length) this.docker("rm", "-f", ...ids);
      } catch {
        // dockerd already gone: its containers went with the kill
      }
      await this.kill();
    }
    unmountUnder(this.dir);
    rmSync(this.dir, { recursive: true, force: true });
  }
}
