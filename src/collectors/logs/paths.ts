/** Which files to tail (glob expansion) and what their paths say about the container that wrote them. */
import { existsSync } from "node:fs";
import type { Attributes } from "../../export/types";

const GLOB_CHARS = /[*?[{]/;
/** `/var/log/containers/<pod>_<namespace>_<container>-<64 hex id>.log` (kubelet's symlinks). */
const K8S_CONTAINERS_LOG = /\/([^/_]+)_([^/_]+)_([^/]+)-([0-9a-f]{64})\.log$/;
/** `/var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart>.log` (kubelet's files). */
const K8S_PODS_LOG = /\/([^/_]+)_([^/_]+)_([0-9a-f-]{36})\/([^/]+)\/(\d+)\.log$/;
/** `/var/lib/docker/containers/<id>/<id>-json.log` (dockerd json-file). */
const DOCKER_LOG = /\/([0-9a-f]{64})\/\1-json\.log$/;

/** Splits an absolute pattern into the directory to scan from and the pattern relative to it. */
export function splitPattern(pattern: string): { base: string; rest: string } {
  const parts = pattern.split("/");
  let i = 0;
  while (i < parts.length && !GLOB_CHARS.test(parts[i]!)) i++;
  if (i === parts.length) return { base: parts.slice(0, -1).join("/") || "/", rest: parts.at(-1)! };
  return { base: parts.slice(0, i).join("/") || "/", rest: parts.slice(i).join("/") };
}

/** Every existing regular file matched by an include pattern and by no exclude pattern (symlinks followed), sorted. */
export function expandGlobs(include: readonly string[], exclude: readonly string[]): string[] {
  const excluded = exclude.map((p) => new Bun.Glob(p));
  const found = new Set<string>();
  for (const pattern of include) {
    const { base, rest } = splitPattern(pattern);
    if (!existsSync(base)) continue;
    try {
      for (const path of new Bun.Glob(rest).scanSync({ cwd: base, absolute: true, followSymlinks: true, onlyFiles: true, dot: true }))
        if (!excluded.some((g) => g.match(path))) found.add(path);
    } catch {
      // A directory vanished or is unreadable while scanning: the next rescan tries again.
    }
  }
  return [...found].sort();
}

/** The container id a log path names, when it names one. */
export function containerIdOfPath(path: string): string | undefined {
  return K8S_CONTAINERS_LOG.exec(path)?.[4] ?? DOCKER_LOG.exec(path)?.[1];
}

/** Kubernetes and container attributes that the path itself carries (kubelet and dockerd naming conventions). */
export function attributesOfPath(path: string): Attributes {
  const a: Attributes = {};
  const c = K8S_CONTAINERS_LOG.exec(path);
  if (c) {
    a["k8s.pod.name"] = c[1]!;
    a["k8s.namespace.name"] = c[2]!;
    a["k8s.container.name"] = c[3]!;
    a["container.id"] = c[4]!;
  }
  const p = K8S_PODS_LOG.exec(path);
  if (p) {
    a["k8s.namespace.name"] = p[1]!;
    a["k8s.pod.name"] = p[2]!;
    a["k8s.pod.uid"] = p[3]!;
    a["k8s.container.name"] = p[4]!;
    a["k8s.container.restart_count"] = Number(p[5]);
  }
  const d = DOCKER_LOG.exec(path);
  if (d) a["container.id"] = d[1]!;
  return a;
}
