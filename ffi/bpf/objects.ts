/**
 * The BPF objects embedded in dist/svc-agent (built by ffi/bpf/generate.ts into build/). Each export is a
 * path readable with Bun.file (inside the binary's own filesystem when compiled). Importing this module
 * needs a build first (`bun run build.ts` or `bash .ci/setup`).
 */
import processObject from "../../build/process.bpf.o" with { type: "file" };
import profileObject from "../../build/profile.bpf.o" with { type: "file" };
import networkObject from "../../build/network.bpf.o" with { type: "file" };
import syscallsObject from "../../build/syscalls.bpf.o" with { type: "file" };
import tlsObject from "../../build/tls.bpf.o" with { type: "file" };

/** Embedded objects by program set name. */
export const EMBEDDED_OBJECTS: Record<string, string> = {
  process: processObject,
  profile: profileObject,
  network: networkObject,
  syscalls: syscallsObject,
  tls: tlsObject,
};
