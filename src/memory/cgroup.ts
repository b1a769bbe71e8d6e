/**
 * The memory limit of the cgroup the agent runs in: cgroup v2 `memory.max` (the tightest of its own cgroup and
 * every ancestor's, as the kernel enforces them all), or v1 `memory.limit_in_bytes`. Undefined when there is
 * none ("max", or v1's near-2^63 "unlimited") or it cannot be read.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

/** v1 writes "no limit" as a page-rounded 2^63 - 1; anything above this is taken as no limit. */
const V1_UNLIMITED_ABOVE_BYTES = 2 ** 62;

function read(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8").trim();
  } catch {
    return undefined;
  }
}

/** `procSelfCgroup` and `root` are for tests (default: /proc/self/cgroup and /sys/fs/cgroup). */
export function cgroupMemoryLimit(procSelfCgroup = "/proc/self/cgroup", root = "/sys/fs/cgroup"): number | undefined {
  const lines = read(procSelfCgroup)?.split("\n") ?? [];
  const v2 = lines.find((l) => l.startsWith("0::"));
  if (v2 !== undefined) {
    let best: number | undefined;
    for (let dir = v2.slice(3) || "/"; ; dir = dir.slice(0, dir.lastIndexOf("/")) || "/") {
      const max = read(join(root, dir, "memory.max"));
      if (max !== undefined && max !== "max" && /^\d+$/.test(max)) best = Math.min(best ?? Infinity, Number(max));
      if (dir === "/") break;
    }
    if (best !== undefined) return best;
  }
  const v1 = lines.map((l) => l.split(":")).find((f) => f[1]?.split(",").includes("memory"));
  if (v1) {
    const limit = read(join(root, "memory", v1[2] ?? "/", "memory.limit_in_bytes")) ?? read(join(root, "memory", "memory.limit_in_bytes"));
    if (limit && /^\d+$/.test(limit) && Number(limit) < V1_UNLIMITED_ABOVE_BYTES) return Number(limit);
  }
  return undefined;
}
