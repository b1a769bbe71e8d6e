/** Shared by the privileged eBPF tests: bounded polling and bpftool checks that nothing stays loaded. */

/** Polls `cond` every few ms for at most `ms`; throws naming `what`. */
export async function until(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (cond()) return;
    await Bun.sleep(5);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}

export function bpftool(what: "prog" | "link"): Array<{ id: number; prog_id?: number }> {
  const r = Bun.spawnSync(["bpftool", "-j", what, "list"]);
  if (r.exitCode !== 0) throw new Error(`bpftool ${what} list failed: ${r.stderr.toString()}`);
  return JSON.parse(r.stdout.toString() || "[]") as Array<{ id: number; prog_id?: number }>;
}

/** Waits until none of `ids` is a loaded program or a link's program (the kernel frees them after RCU). */
export async function expectReleased(ids: number[]): Promise<void> {
  await until(() => {
    const progs = new Set(bpftool("prog").map((p) => p.id));
    const linked = new Set(bpftool("link").map((l) => l.prog_id));
    return ids.every((id) => !progs.has(id) && !linked.has(id));
  }, `programs ${ids.join(",")} to leave bpftool prog/link list`);
}
