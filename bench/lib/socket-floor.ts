/**
 * The floor under the BPF time of the socket programs: ffi/bpf/socket-floor.bpf.c's two empty programs on
 * sock_send_length and sock_recv_length (floor_*), attached beside the agent's for the runs with bpf_stats on. Their
 * ns per run is what any program run there costs before doing anything (the tracepoint's dispatch and bpf_stats's
 * own two clock reads), measured in the same runs as the agent's programs. With `parts`, also the part_* programs
 * on sock_recv_length, each doing one step of the agent's programs (a clock read, a 12-byte user read, a per-CPU
 * hash count). Needs root and a build (build/socket-floor.bpf.o).
 */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { openBpfRuntime } from "../../ffi";

const OBJECT = join(resolve(import.meta.dir, "../.."), "build/socket-floor.bpf.o");

export interface SocketFloor {
  /** Program ids, for bpfRunStats. */
  readonly ids: Set<number>;
  /** Program names by id. */
  readonly names: Map<number, string>;
  close(): void;
}

export async function attachSocketFloor(options: { parts?: boolean } = {}): Promise<SocketFloor> {
  const runtime = await openBpfRuntime(process.env);
  const object = runtime.openObject(new Uint8Array(readFileSync(OBJECT)), "socket-floor");
  try {
    const programs = object.programs().filter((p) => options.parts || p.name.startsWith("floor_"));
    for (const p of object.programs()) p.setAutoload(programs.includes(p));
    object.load({ quiet: true });
    const links = programs.map((p) => p.attach({ kind: "tp_btf" }));
    return {
      ids: new Set(programs.map((p) => p.id())),
      names: new Map(programs.map((p) => [p.id(), p.name])),
      close: () => {
        for (const l of links) l.close();
        object.close();
      },
    };
  } catch (e) {
    object.close();
    throw e;
  }
}
