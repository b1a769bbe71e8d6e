/**
 * The libbpf shared library and its dependencies as built into dist/svc-agent (copied from the build
 * machine by ffi/bpf/generate.ts), dependencies first. Importing this module needs a build first.
 */
import libz from "../build/lib/libz.so.1" with { type: "file" };
import libelf from "../build/lib/libelf.so.1" with { type: "file" };
import libbpf from "../build/lib/libbpf.so.1" with { type: "file" };

export const EMBEDDED_LIBS: ReadonlyArray<{ soname: string; path: string }> = [
  { soname: "libz.so.1", path: libz },
  { soname: "libelf.so.1", path: libelf },
  { soname: "libbpf.so.1", path: libbpf },
];
