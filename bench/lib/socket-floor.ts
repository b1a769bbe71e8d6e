/**
 * The floor under the BPF time of the socket programs: ffi/bpf/socket-floor.bpf.c's two empty programs on
 * sock_send_length and sock_recv_length (floor_*), attached beside the agent's for the runs with bpf_stats on. Their
 * ns per run is what any program run there costs before doing anything (the tracepoint's dispatch and bpf_stats's
 * own two clock reads), measured in the same runs as the agent's programs. With `parts`, also the part_* programs
 * on sock_recv_length, each doing one step of the agent's programs (a clock read, a 12-byte user read, a per-CPU
 * hash count). With `least`, also least_* on both tracepoints: what every socket call of a counted request does at
 * the least (its connection's socket storage, its buffer from the saved registers, a 12-byte user read), the floor
 * under the agent's programs before they parse, count or budget anything (`empty: false` leaves floor_* out).
 * Needs root and a build
 * (build/socket-floor.bpf.o).
 */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { openBpfRuntime } from "../../ffi";

const OBJECT = join(resolve(import.meta.dir, "../.."), "build/socket-floor.bpf.o");

export interface SocketFloor {
  /** Program ids, for bpfRunStats: every program attached, */
  readonly ids: Set<number>;
  /** the empty ones (floor_*), */
  readonly emptyIds: Set<number>;
  /** and least_* (with `least`). */
  readonly leastIds: Set<number>;
  /** Program names by id. */
  readonly names: Map<number, string>;
  close(): void;
}

export async function attachSocketFloor(options: { parts?: boolean; least?: boolean; empty?: boolean } = {}): Promise<SocketFloor> {
  const runtime = await openBpfRuntime(process.env);
  const object = runtime.openObject(new Uint8Array(readFileSync(OBJECT)), "socket-floor");
  try {
    const programs = object.programs().filter((p) => (options.empty !== false && p.name.startsWith("floor_")) || (options.parts && p.name.startsWith("part_")) || (options.least && p.name.startsWith("least_")));
    for (const p of object.programs()) p.setAutoload(programs.includes(p));
    object.load({ quiet: true });
    const links = programs.map((p) => p.attach({ kind: "tp_btf" }));
    return {
      ids: new Set(programs.map((p) => p.id())),
      emptyIds: new Set(programs.filter((p) => p.name.startsWith("floor_")).map((p) => p.id())),
      leastIds: new Set(programs.filter((p) => p.name.startsWith("least_")).map((p) => p.id())),
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
