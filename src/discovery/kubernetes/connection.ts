/**
 * Where the Kubernetes API is and how to authenticate: the in-cluster service account
 * (KUBERNETES_SERVICE_HOST/PORT, token, ca.crt, namespace files) or a kubeconfig file read with
 * @kubernetes/client-node's KubeConfig. Credentials are looked up before every request: a rotated
 * service-account token (or a changed kubeconfig) is picked up by the next request, and `invalidate()`
 * after a 401 forces a re-read.
 */
import { statSync, readFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import type { KubeConfig as KubeConfigType } from "@kubernetes/client-node";

/** TLS options for Bun's fetch (PEM text). */
export interface TlsSettings {
  /** CA bundle that signs the API server's certificate. */
  ca?: string;
  /** Client certificate (kubeconfig client-certificate). */
  cert?: string;
  /** Client key. */
  key?: string;
  /** False only with insecure-skip-tls-verify. */
  rejectUnauthorized: boolean;
}

/** What a request carries. */
export interface Credentials {
  /** Bearer token, when the identity is a token. */
  token: string | undefined;
  tls: TlsSettings | undefined;
}

/** The configuration cannot give a usable connection (missing file, no current cluster, unsupported auth). */
export class KubeConnectionError extends Error {
  constructor(message: string) {
    super(`kubernetes: ${message}`);
    this.name = "KubeConnectionError";
  }
}

/** A resolved API endpoint with its credentials. */
export interface KubeConnection {
  /** Where the settings came from. */
  mode: "in-cluster" | "kubeconfig";
  /** API address, e.g. https://10.96.0.1:443. */
  server: string;
  /** The agent's own namespace (service account namespace file, or the kubeconfig context's). */
  namespace: string;
  /** The cluster name the kubeconfig gives (empty in-cluster). */
  clusterName: string;
  /** Current credentials; re-reads the token (or kubeconfig) when its file changed. */
  credentials(): Credentials;
  /** Forces the next credentials() to read the files again (after a 401). */
  invalidate(): void;
}

/** True when the in-cluster environment is present: the service variables and the token file. */
export function inClusterAvailable(env: Record<string, string | undefined>, serviceAccountDir: string): boolean {
  return Boolean(env.KUBERNETES_SERVICE_HOST && env.KUBERNETES_SERVICE_PORT && existsSync(join(serviceAccountDir, "token")));
}

function fileStamp(path: string): string {
  const s = statSync(path);
  return `${s.ino}:${s.size}:${s.mtimeMs}`;
}

/** A file re-read only when its inode, size or mtime changed (a projected token is replaced by a symlink swap). */
class WatchedFile {
  #stamp = "";
  #text = "";
  constructor(readonly path: string) {}
  read(): string {
    let stamp: string;
    try {
      stamp = fileStamp(this.path);
    } catch (e) {
      throw new KubeConnectionError(`cannot read ${this.path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    if (stamp !== this.#stamp) {
      this.#text = readFileSync(this.path, "utf8").trim();
      this.#stamp = stamp;
    }
    return this.#text;
  }
  invalidate(): void {
    this.#stamp = "";
  }
}

export function inClusterConnection(env: Record<string, string | undefined>, serviceAccountDir: string): KubeConnection {
  const host = env.KUBERNETES_SERVICE_HOST ?? "";
  const port = env.KUBERNETES_SERVICE_PORT ?? "";
  const server = `https://${host.includes(":") ? `[${host}]` : host}:${port}`;
  const token = new WatchedFile(join(serviceAccountDir, "token"));
  const caPath = join(serviceAccountDir, "ca.crt");
  const ca = existsSync(caPath) ? new WatchedFile(caPath) : undefined;
  let namespace = "default";
  try {
    namespace = readFileSync(join(serviceAccountDir, "namespace"), "utf8").trim() || "default";
  } catch {
    // no namespace file: the API's default
  }
  return {
    mode: "in-cluster",
    server,
    namespace,
    clusterName: "",
    credentials: () => ({ token: token.read(), tls: { ca: ca?.read(), rejectUnauthorized: true } }),
    invalidate: () => {
      token.invalidate();
      ca?.invalidate();
    },
  };
}

function readOptional(data: string | undefined, file: string | undefined): string | undefined {
  if (data) return Buffer.from(data, "base64").toString("utf8");
  if (file) return readFileSync(file, "utf8");
  return undefined;
}

/**
 * A KubeConfig, its library loaded on first use: @kubernetes/client-node costs ~8 MB of heap and ~0.7 s of
 * start-up to evaluate, and only a kubeconfig connection needs it (in-cluster credentials are read directly).
 */
function newKubeConfig(): KubeConfigType {
  const { KubeConfig } = require("@kubernetes/client-node") as typeof import("@kubernetes/client-node");
  return new KubeConfig();
}

export function kubeconfigConnection(path: string): KubeConnection {
  const file = new WatchedFile(path);
  const load = () => {
    const kc = newKubeConfig();
    try {
      kc.loadFromString(file.read());
    } catch (e) {
      if (e instanceof KubeConnectionError) throw e;
      throw new KubeConnectionError(`kubeconfig ${path}: ${(e as Error).message}`);
    }
    const cluster = kc.getCurrentCluster();
    const user = kc.getCurrentUser();
    if (!cluster) throw new KubeConnectionError(`kubeconfig ${path}: no current cluster`);
    if (user?.exec || user?.authProvider) throw new KubeConnectionError(`kubeconfig ${path}: exec and auth-provider credentials are not supported; use a token or a client certificate`);
    const context = kc.getContextObject(kc.getCurrentContext());
    let tls: TlsSettings | undefined;
    try {
      tls = cluster.server.startsWith("https:")
        ? {
            ca: readOptional(cluster.caData, cluster.caFile),
            cert: readOptional(user?.certData, user?.certFile),
            key: readOptional(user?.keyData, user?.keyFile),
            rejectUnauthorized: !cluster.skipTLSVerify,
          }
        : undefined;
    } catch (e) {
      throw new KubeConnectionError(`kubeconfig ${path}: ${(e as Error).message}`);
    }
    return { server: cluster.server.replace(/\/+$/, ""), clusterName: cluster.name, namespace: context?.namespace ?? "default", creds: { token: user?.token || undefined, tls } };
  };
  let current = load();
  let stamp = fileStamp(path);
  return {
    mode: "kubeconfig",
    server: current.server,
    namespace: current.namespace,
    clusterName: current.clusterName,
    credentials: () => {
      let now: string;
      try {
        now = fileStamp(path);
      } catch {
        now = stamp;
      }
      if (now !== stamp) {
        current = load();
        stamp = now;
      }
      return current.creds;
    },
    invalidate: () => {
      file.invalidate();
      stamp = "";
    },
  };
}
