/**
 * The image staging's reading of `ldd` (deploy/container/stage-rootfs.ts): the objects the dynamic linker
 * maps, interpreter included, vdso excluded, a missing library an error; and the staged tree itself.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { IMAGE_BINARY_PATH, NONROOT_UID, parseLdd, stageRootfs, StageError } from "../../deploy/container/stage-rootfs";
import { BINARY } from "../helpers/agent-process";

const LDD_OUTPUT = `	linux-vdso.so.1 (0x00007ffd8a5f2000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0d1c820000)
	/lib64/ld-linux-x86-64.so.2 (0x00007f0d1ca16000)
	libpthread.so.0 => /lib/x86_64-linux-gnu/libpthread.so.0 (0x00007f0d1c81b000)
	libm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f0d1c736000)
`;

describe("stage-rootfs", () => {
  test("ldd output gives the mapped objects with the interpreter, without the vdso", () => {
    expect(parseLdd(LDD_OUTPUT)).toEqual([
      "/lib/x86_64-linux-gnu/libc.so.6",
      "/lib64/ld-linux-x86-64.so.2",
      "/lib/x86_64-linux-gnu/libpthread.so.0",
      "/lib/x86_64-linux-gnu/libm.so.6",
    ]);
    expect(parseLdd("\tstatically linked\n")).toEqual([]);
    expect(() => parseLdd(`${LDD_OUTPUT}\tlibbpf.so.1 => not found\n`)).toThrow(StageError);
  });

  test.skipIf(!existsSync(BINARY))("the staged tree: binary, every ldd object, a sticky /tmp, the users", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-deploy-stage-"));
    try {
      const staged = await stageRootfs(BINARY, join(dir, "ctx"));
      const root = join(staged.context, "rootfs");
      expect(statSync(join(root, IMAGE_BINARY_PATH)).size).toBe(statSync(BINARY).size);
      const ldd = Bun.spawnSync(["ldd", BINARY], { stdout: "pipe" }).stdout.toString();
      for (const lib of parseLdd(ldd)) expect(existsSync(join(root, lib))).toBe(true);
      expect(staged.libraries).toEqual(parseLdd(ldd));
      expect(statSync(join(root, "tmp")).mode & 0o7777).toBe(0o1777);
      expect(readFileSync(join(root, "etc/passwd"), "utf8")).toContain(`nonroot:x:${NONROOT_UID}:${NONROOT_UID}:`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
