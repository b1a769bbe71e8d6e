/**
 * Absolute paths for shared libraries named by their soname. Bun's dlopen of a bare name tries the current
 * directory first, so a library planted there would be loaded into a privileged agent: every dlopen in ffi/
 * goes through an absolute path found here (LD_LIBRARY_PATH, /etc/ld.so.conf.d, then the usual directories).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const LIBRARY_DIRS = [
  "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib/aarch64-linux-gnu",
  "/usr/lib64", "/lib64", "/usr/lib", "/lib",
];
const LD_SO_CONF_DIR = "/etc/ld.so.conf.d";

/** The directories of /etc/ld.so.conf.d/*.conf (one level, no include directives). */
function ldSoConfDirs(): string[] {
  const out: string[] = [];
  try {
    for (const f of readdirSync(LD_SO_CONF_DIR).filter((n) => n.endsWith(".conf")).sort())
      for (const line of readFileSync(join(LD_SO_CONF_DIR, f), "utf8").split("\n")) {
        const d = line.replace(/#.*/, "").trim();
        if (d.startsWith("/")) out.push(d);
      }
  } catch {
    // No ld.so.conf.d: the fixed list applies.
  }
  return out;
}

/** The directories searched for `findLibrary`, in order, without duplicates. */
export function librarySearchDirs(env: Record<string, string | undefined>, extraDirs: readonly string[] = []): string[] {
  return [...new Set([...(env.LD_LIBRARY_PATH ?? "").split(":").filter((d) => d.startsWith("/")), ...ldSoConfDirs(), ...LIBRARY_DIRS, ...extraDirs])];
}

/** An absolute path for `library`: itself when it contains a slash, else the first searched directory holding it. */
export function findLibrary(library: string, env: Record<string, string | undefined>, extraDirs: readonly string[] = []): string | undefined {
  if (library.includes("/")) return library;
  for (const d of librarySearchDirs(env, extraDirs)) {
    const candidate = join(d, library);
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}
