/**
 * Build step (build.ts GENERATORS): produces the native inputs embedded in dist/svc-agent.
 *   - build/vmlinux.h from the build machine's BTF (`bpftool btf dump ... format c`), the CO-RE header;
 *   - build/<name>.bpf.o for every ffi/bpf/<name>.bpf.c and build/testdata/<name>.bpf.o for ffi/bpf/testdata
 *     (clang -O2 -g -target bpf; DWARF stripped, BTF kept);
 *   - build/lib/{libbpf.so.1,libelf.so.1,libz.so.1}: the build machine's libbpf and what it needs, so the
 *     binary can load eBPF on hosts without libbpf.
 * Each output is skipped when it is newer than its inputs.
 */
import { $ } from "bun";
import { copyFileSync, existsSync, mkdirSync, readdirSync, realpathSync, statSync } from "node:fs";
import { basename, join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "../..");
const SRC_DIR = join(ROOT, "ffi/bpf");
const OUT_DIR = join(ROOT, "build");
const VMLINUX_BTF = "/sys/kernel/btf/vmlinux";
const LIB_DIRS = ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/lib"];
/** The libraries embedded in the binary, dependencies first. */
export const EMBEDDED_LIBS = ["libz.so.1", "libelf.so.1", "libbpf.so.1"] as const;

function mtimeMs(path: string): number {
  return existsSync(path) ? statSync(path).mtimeMs : 0;
}

function upToDate(output: string, inputs: string[]): boolean {
  const out = mtimeMs(output);
  return out > 0 && inputs.every((i) => mtimeMs(i) <= out);
}

async function vmlinuxHeader(): Promise<string> {
  const out = join(OUT_DIR, "vmlinux.h");
  if (existsSync(out) && statSync(out).size > 0) return out;
  if (!existsSync(VMLINUX_BTF)) throw new Error(`${VMLINUX_BTF} is missing: the build machine needs a kernel with BTF`);
  const r = await $`bpftool btf dump file ${VMLINUX_BTF} format c > ${out + ".tmp"} && mv ${out + ".tmp"} ${out}`.nothrow().quiet();
  if (r.exitCode !== 0) throw new Error(`bpftool btf dump failed: ${r.stderr.toString()}`);
  return out;
}

async function compile(source: string, output: string, headers: string[]): Promise<boolean> {
  if (upToDate(output, [source, ...headers])) return false;
  const r = await $`clang -O2 -g -Wall -Werror -target bpf -D__TARGET_ARCH_x86 -I${OUT_DIR} -I${SRC_DIR} -c ${source} -o ${output}`.nothrow().quiet();
  if (r.exitCode !== 0) throw new Error(`clang failed for ${source}:\n${r.stderr.toString()}`);
  const s = await $`llvm-strip -g ${output}`.nothrow().quiet();
  if (s.exitCode !== 0) throw new Error(`llvm-strip failed for ${output}: ${s.stderr.toString()}`);
  return true;
}

function findLib(soname: string): string {
  for (const dir of LIB_DIRS) {
    const p = join(dir, soname);
    if (existsSync(p)) return realpathSync(p);
  }
  throw new Error(`${soname} not found in ${LIB_DIRS.join(", ")} (apt-get install libbpf1 libelf1 zlib1g)`);
}

function copyLibs(): void {
  const dir = join(OUT_DIR, "lib");
  mkdirSync(dir, { recursive: true });
  for (const soname of EMBEDDED_LIBS) {
    const src = findLib(soname);
    const dst = join(dir, soname);
    if (!upToDate(dst, [src])) copyFileSync(src, dst);
  }
}

export async function generate(): Promise<void> {
  mkdirSync(join(OUT_DIR, "testdata"), { recursive: true });
  const vmlinux = await vmlinuxHeader();
  // Every header of the programs (common.h, red.h, ...): an object is rebuilt when any of them changed.
  const headers = [vmlinux, ...readdirSync(SRC_DIR).filter((n) => n.endsWith(".h")).map((n) => join(SRC_DIR, n))];
  const jobs: Array<Promise<boolean>> = [];
  for (const [dir, out] of [[SRC_DIR, OUT_DIR], [join(SRC_DIR, "testdata"), join(OUT_DIR, "testdata")]] as const) {
    for (const f of readdirSync(dir).filter((n) => n.endsWith(".bpf.c")).sort()) {
      jobs.push(compile(join(dir, f), join(out, basename(f, ".c") + ".o"), headers));
    }
  }
  await Promise.all(jobs);
  copyLibs();
}

if (import.meta.main) await generate();
