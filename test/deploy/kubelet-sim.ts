/**
 * Turns the DaemonSet's Pod template into a `docker run` the way a kubelet would realise it on one node,
 * for the image test: volumes (hostPath with its type checks, configMap written to a directory, emptyDir
 * as a node directory), env (plain values, the downward API's spec.nodeName, secretKeyRef from a given
 * secret store), args, securityContext (privileged, runAsUser/runAsGroup, readOnlyRootFilesystem) and
 * hostPID. What cannot be had without a cluster is said by the caller: the Pod gets its own network
 * namespace with only loopback (`--network none`), not a Pod network, and hostPaths may be redirected
 * to test directories (log and state directories, so the host's own are not touched).
 */
import { existsSync, mkdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";

type Obj = Record<string, any>;

export interface KubeletSimOptions {
  /** Directory for configMap contents and emptyDirs. */
  workDir: string;
  nodeName: string;
  /** Secrets by name: key -> value. */
  secrets: Record<string, Record<string, string>>;
  /** ConfigMaps by name: key -> text. */
  configMaps: Record<string, Record<string, string>>;
  /** hostPath redirections: path on the "node" -> directory used instead. */
  hostPathRedirects?: Record<string, string>;
  /** Flags that stand in for `privileged: true` where the machine cannot grant it. */
  privilegedFlags: string[];
}

/** The `docker run` arguments (without the image) for the first container of `podSpec`. */
export function dockerRunArgs(podSpec: Obj, o: KubeletSimOptions): string[] {
  const c = podSpec.containers[0] as Obj;
  const args: string[] = [];
  if (podSpec.hostPID) args.push("--pid=host");
  args.push(podSpec.hostNetwork ? "--network=host" : "--network=none");
  const sc = (c.securityContext ?? {}) as Obj;
  if (sc.privileged) args.push(...o.privilegedFlags);
  if (sc.runAsUser !== undefined) args.push("--user", `${sc.runAsUser}:${sc.runAsGroup ?? sc.runAsUser}`);
  if (sc.readOnlyRootFilesystem) args.push("--read-only");

  const volumes = new Map<string, Obj>((podSpec.volumes as Obj[]).map((v) => [v.name, v]));
  for (const m of c.volumeMounts as Obj[]) {
    const v = volumes.get(m.name);
    if (!v) throw new Error(`volumeMount ${m.name} has no volume`);
    let source: string;
    if (v.hostPath) {
      const path = o.hostPathRedirects?.[v.hostPath.path] ?? v.hostPath.path;
      const type = v.hostPath.type ?? "";
      if (type === "DirectoryOrCreate") mkdirSync(path, { recursive: true });
      else if (type === "Directory" && !(existsSync(path) && statSync(path).isDirectory())) throw new Error(`hostPath ${path} (Directory) does not exist on this node`);
      else if (type === "Socket" && !(existsSync(path) && statSync(path).isSocket())) throw new Error(`hostPath ${path} (Socket) is not a socket on this node`);
      source = path;
    } else if (v.configMap) {
      source = join(o.workDir, `configmap-${m.name}`);
      mkdirSync(source, { recursive: true });
      const data = o.configMaps[v.configMap.name];
      if (!data) throw new Error(`configMap ${v.configMap.name} not given`);
      for (const [k, text] of Object.entries(data)) writeFileSync(join(source, k), text);
    } else if (v.emptyDir) {
      source = join(o.workDir, `emptydir-${m.name}`);
      mkdirSync(source, { recursive: true, mode: 0o777 });
    } else throw new Error(`volume ${m.name}: only hostPath, configMap and emptyDir are simulated`);
    args.push("-v", `${source}:${m.mountPath}${m.readOnly || v.configMap ? ":ro" : ""}`);
  }

  for (const e of (c.env ?? []) as Obj[]) {
    let value: string;
    if (e.value !== undefined) value = String(e.value);
    else if (e.valueFrom?.fieldRef?.fieldPath === "spec.nodeName") value = o.nodeName;
    else if (e.valueFrom?.secretKeyRef) {
      const ref = e.valueFrom.secretKeyRef as Obj;
      const v = o.secrets[ref.name]?.[ref.key];
      if (v === undefined) throw new Error(`secret ${ref.name} has no key ${ref.key}`);
      value = v;
    } else throw new Error(`env ${e.name}: source not simulated`);
    args.push("-e", `${e.name}=${value}`);
  }
  return args;
}

/** The container port a probe's `port` (a name or a number) stands for. */
export function probePort(container: Obj, port: string | number): number {
  if (typeof port === "number") return port;
  const p = (container.ports as Obj[]).find((x) => x.name === port);
  if (!p) throw new Error(`no container port named ${port}`);
  return p.containerPort as number;
}
