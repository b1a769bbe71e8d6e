/**
 * Stages the root filesystem of the svc-agent container image: the compiled binary plus exactly the
 * shared libraries `ldd` says it loads (and the dynamic linker), a world-writable sticky /tmp (the
 * embedded libbpf is extracted there before it is mapped), /etc/passwd and /etc/group with root and
 * the unprivileged `nonroot` user, nsswitch.conf and the CA bundle. No shell, no package manager.
 *
 *   bun deploy/container/stage-rootfs.ts [BINARY] [CONTEXT_DIR]     (default dist/svc-agent build/image)
 *   docker build -f deploy/container/Dockerfile -t svc-agent:VERSION build/image
 *
 * The Dockerfile is `FROM scratch` + `COPY rootfs/ /`, so the image built by CI from this machine's
 * files and the image an operator builds are the same recipe.
 */
import { $ } from "bun";
import { chmodSync, copyFileSync, existsSync, mkdirSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

/** Where the binary lives inside the image. */
export const IMAGE_BINARY_PATH = "/usr/bin/svc-agent";
/** The unprivileged user the image runs as unless told otherwise (distroless' `nonroot`). */
export const NONROOT_UID = 65532;
const CA_BUNDLE_PATH = "/etc/ssl/certs/ca-certificates.crt";
const TMP_MODE = 0o1777;
const DEFAULT_BINARY = "dist/svc-agent";
const DEFAULT_CONTEXT = "build/image";

export interface StagedRootfs {
  /** The build context directory (holds rootfs/). */
  context: string;
  /** Absolute paths inside the image of the shared objects copied (interpreter included). */
  libraries: string[];
}

/** Thrown when the binary's dependencies cannot be listed or a library is missing. */
export class StageError extends Error {
  override name = "StageError";
}

/** Parses `ldd` output into the absolute paths of the objects the dynamic linker maps (vdso excluded). */
export function parseLdd(text: string): string[] {
  const out: string[] = [];
  for (const line of text.split("\n")) {
    const arrow = /=>\s+(\/\S+)/.exec(line);
    const bare = /^\s*(\/\S+)\s+\(0x/.exec(line);
    const path = arrow?.[1] ?? bare?.[1];
    if (line.includes("=> not found")) throw new StageError(`missing library: ${line.trim()}`);
    if (path && !out.includes(path)) out.push(path);
  }
  return out;
}

/** Copies `src` (following symlinks) to `root` + `inImagePath`. */
function place(root: string, src: string, inImagePath: string, mode?: number): void {
  const dst = join(root, inImagePath);
  mkdirSync(dirname(dst), { recursive: true });
  copyFileSync(realpathSync(src), dst);
  if (mode !== undefined) chmodSync(dst, mode);
}

/** Builds the context directory `context` (emptied first) from `binary`. */
export async function stageRootfs(binary = DEFAULT_BINARY, context = DEFAULT_CONTEXT): Promise<StagedRootfs> {
  const bin = resolve(binary);
  if (!existsSync(bin)) throw new StageError(`${bin} does not exist: run \`bun run build\` first`);
  const ldd = await $`ldd ${bin}`.nothrow().quiet();
  if (ldd.exitCode !== 0) throw new StageError(`ldd ${bin} failed: ${ldd.stderr.toString().trim()}`);
  const libraries = parseLdd(ldd.stdout.toString());

  const ctx = resolve(context);
  const root = join(ctx, "rootfs");
  rmSync(ctx, { recursive: true, force: true });
  mkdirSync(root, { recursive: true });

  place(root, bin, IMAGE_BINARY_PATH, 0o755);
  for (const lib of libraries) place(root, lib, lib, 0o755);
  if (existsSync(CA_BUNDLE_PATH)) place(root, CA_BUNDLE_PATH, CA_BUNDLE_PATH, 0o644);

  mkdirSync(join(root, "tmp"), { recursive: true });
  chmodSync(join(root, "tmp"), TMP_MODE);
  mkdirSync(join(root, "etc/svc-agent"), { recursive: true });
  writeFileSync(
    join(root, "etc/passwd"),
    `root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:${NONROOT_UID}:${NONROOT_UID}:nonroot:/home/nonroot:/sbin/nologin\n`,
  );
  writeFileSync(join(root, "etc/group"), `root:x:0:\nnonroot:x:${NONROOT_UID}:\n`);
  writeFileSync(join(root, "etc/nsswitch.conf"), "hosts: files dns\n");
  return { context: ctx, libraries };
}

if (import.meta.main) {
  const [binary, context] = process.argv.slice(2);
  const staged = await stageRootfs(binary, context);
  console.log(`staged ${staged.context}/rootfs: ${IMAGE_BINARY_PATH} + ${staged.libraries.join(" ")}`);
}
