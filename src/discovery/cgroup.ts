/**
 * Finds the container a process runs in from its cgroup paths (/proc/<pid>/cgroup): Docker
 * (`/docker/<id>`, `docker-<id>.scope`), containerd/CRI (`cri-containerd-<id>.scope`, `/kubepods/.../<id>`),
 * CRI-O (`crio-<id>.scope`), cgroup v1 and v2 alike.
 */
import { readFileSync } from "node:fs";

const CONTAINER_ID_RE = /(?:^|[/\-:])([0-9a-f]{64})(?:\.scope)?(?=$|\/)/g;

/** The container id in the text of a /proc/<pid>/cgroup file (the last one on the deepest path), or undefined. */
export function containerIdFromCgroup(text: string): string | undefined {
  let found: string | undefined;
  for (const line of text.split("\n")) {
    const path = line.slice(line.indexOf(":", line.indexOf(":") + 1) + 1);
    for (const m of path.matchAll(CONTAINER_ID_RE)) found = m[1];
    if (found) return found;
  }
  return found;
}

/** Reads /proc/<pid>/cgroup under `procRoot`; undefined when the process is gone or is in no container. */
export function readContainerIdOfPid(procRoot: string, pid: number): string | undefined {
  let text: string;
  try {
    text = readFileSync(`${procRoot}/${pid}/cgroup`, "utf8");
  } catch {
    return undefined;
  }
  return containerIdFromCgroup(text);
}
