/**
 * ffi/bpf/tls-least.bpf.c's probes (what probing SSL calls needs at the least: the call's buffer kept at entry, the
 * byte count and 12 bytes of plaintext read at return) attached at the agent's probe sites
 * (src/collectors/tls/placement.ts) on the libssl at `path`, which the agent must not probe itself. Needs root and a
 * build (build/tls-least.bpf.o).
 */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { openBpfRuntime } from "../../ffi";
import { probeSites } from "../../src/collectors/tls/placement";
import { TLS_FUNCTIONS } from "../../src/collectors/tls/targets";

const OBJECT = join(resolve(import.meta.dir, "../.."), "build/tls-least.bpf.o");

export interface TlsLeast {
  /** Program ids, for bpfRunStats. */
  readonly ids: Set<number>;
  /** The probe sites attached: "function@offset". */
  readonly sites: string[];
  close(): void;
}

export async function attachTlsLeast(path: string): Promise<TlsLeast> {
  const runtime = await openBpfRuntime(process.env);
  const object = runtime.openObject(new Uint8Array(readFileSync(OBJECT)), "tls-least");
  const links: Array<{ close(): void }> = [];
  try {
    object.load({ quiet: true });
    const program = (name: string) => {
      const p = object.program(name);
      if (!p) throw new Error(`tls-least.bpf.o: no program ${name}`);
      return p;
    };
    const leave = program("least_leave");
    const sites = probeSites(path, TLS_FUNCTIONS);
    for (const site of sites) {
      const enter = program(site.program.endsWith("_ex") ? "least_enter_ex" : "least_enter_plain");
      const at = site.offset === undefined ? { binary: path, func: site.program } : { binary: path, func: site.program, offset: site.offset };
      links.push(enter.attach({ kind: "uprobe", ...at }));
      links.push(leave.attach({ kind: "uretprobe", ...at }));
    }
    return {
      ids: new Set(object.programs().map((p) => p.id())),
      sites: sites.map((s) => `${s.program}@${s.offset ?? "entry"}`),
      close: () => {
        for (const l of links) l.close();
        object.close();
      },
    };
  } catch (e) {
    for (const l of links) l.close();
    object.close();
    throw e;
  }
}
