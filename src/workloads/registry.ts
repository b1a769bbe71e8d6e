/**
 * The workload registry: the resource of every process the agent reports on. It joins the process table (what
 * a process runs, its container; children forked without exec share their parent's image), the container
 * directory of discovery (container.*, k8s.*), and what the process declares in its own environment
 * (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), and resolves the identity in the order of ./identity.ts.
 *
 * One resource object per process image, reused for as long as nothing it is made of changes (the export
 * encoder caches encoded resources by object identity); a new object when discovery learns more about the
 * container. Bounded by the process table: the cache is keyed weakly by the table's image objects, which go
 * with their processes. The agent's own process gets `undefined` (the agent's own resource).
 */
import { hostname } from "node:os";
import { ProcessTable, procfsAt, type ProcessImage } from "../ebpf/process-table";
import type { ContainerDirectory } from "../discovery/directory";
import type { WorkloadDirectory } from "../discovery/types";
import type { Attributes } from "../export/types";
import { ownKernelPid } from "../ebpf/self";
import { EnvironReader, type OtelEnvironment } from "./environ";
import { containerIdentityAttributes, identityAttributes, UNKNOWN_WORKLOAD } from "./identity";

export interface WorkloadRegistryOptions {
  /** Where /proc is (tests pass a fake tree). */
  procRoot?: string;
  /** The agent's own pid as the kernel sees it. */
  selfPid?: number;
  hostName?: string;
  now?: () => number;
}

interface Resolved {
  /** undefined: not read yet; null: could not be read. */
  env: OtelEnvironment | null | undefined;
  /** The directory's attributes the resource was made with (identity compared). */
  container: Attributes | undefined;
  resource: Attributes;
}

export class WorkloadRegistry implements WorkloadDirectory {
  readonly directory: ContainerDirectory;
  readonly #procRoot: string;
  readonly #selfPid: number;
  readonly #hostName: string;
  readonly #now: () => number;
  readonly #environ: EnvironReader;
  #resolved = new WeakMap<ProcessImage, Resolved>();
  readonly #byContainerAttributes = new WeakMap<Attributes, Attributes>();
  #attached: ProcessTable | undefined;
  readonly #own: ProcessTable;
  /** Environment reads done (tests, debugging). */
  environReads = 0;

  constructor(directory: ContainerDirectory, options: WorkloadRegistryOptions = {}) {
    this.directory = directory;
    this.#procRoot = options.procRoot ?? "/proc";
    this.#selfPid = options.selfPid ?? ownKernelPid();
    this.#hostName = options.hostName ?? hostname();
    this.#now = options.now ?? Date.now;
    this.#environ = new EnvironReader(this.#procRoot);
    // Used while no eBPF table is attached: fed by /proc reads alone (entries read again after LOOKUP_TTL_MS).
    this.#own = new ProcessTable(procfsAt(this.#procRoot), undefined, undefined, this.#now);
  }

  /** Uses the eBPF core's process table (fed by exec, fork and exit events) instead of reading /proc alone. Idempotent. */
  attachProcesses(table: ProcessTable): void {
    this.#attached = table;
  }

  #table(): ProcessTable {
    return this.#attached ?? this.#own;
  }

  /** What discovery knows of a container (container.*, k8s.*), without identity. */
  forContainer(containerId: string): Attributes | undefined {
    return this.directory.forContainer(containerId);
  }

  /** The resource of a process's telemetry (same object while nothing changes); undefined for the agent itself. */
  forPid(pid: number): Attributes | undefined {
    if (pid === this.#selfPid) return undefined;
    const info = this.#table().lookup(pid);
    if (!info) {
      // Not in /proc any more: what discovery knows of its container, if the runtime named it as a main pid.
      const id = this.directory.containerIdOf(pid);
      return id ? this.resourceOfContainer(id) : UNKNOWN_WORKLOAD;
    }
    const image = info.image;
    // The table read the cgroup; the runtime's main pids cover cgroup layouts it cannot parse.
    const containerId = image.containerId ?? info.containerId ?? this.directory.containerOfMainPid(image.pid);
    const container = containerId ? this.directory.forContainer(containerId) : undefined;
    let r = this.#resolved.get(image);
    if (r && r.container === container && r.env !== undefined) return r.resource;
    const env = r?.env !== undefined ? r.env : this.#readEnv(image.pid, pid);
    const resource = identityAttributes({ pid: image.pid, executable: image.executable, executableName: image.executableName, env: env ?? undefined, containerId, container, hostName: this.#hostName });
    r = { env, container, resource };
    this.#resolved.set(image, r);
    return resource;
  }

  /** The resource of a container's telemetry not tied to a process (its log files); one object per state of the container's attributes. */
  resourceOfContainer(containerId: string, extra?: Attributes): Attributes {
    const known = this.directory.forContainer(containerId);
    if (known && !extra) {
      let r = this.#byContainerAttributes.get(known);
      if (!r) this.#byContainerAttributes.set(known, (r = containerIdentityAttributes(known, this.#hostName)));
      return r;
    }
    return containerIdentityAttributes({ "container.id": containerId, ...extra, ...known }, this.#hostName);
  }

  #readEnv(imagePid: number, pid: number): OtelEnvironment | null {
    this.environReads++;
    const env = this.#environ.read(imagePid) ?? (pid !== imagePid ? this.#environ.read(pid) : undefined);
    return env ?? null;
  }

  forgetPid(pid: number): void {
    this.directory.forgetPid(pid);
  }

  serviceAt(address: string, port: number): string | undefined {
    return this.directory.serviceAt(address, port);
  }

  /** The directory's container id of a process (tests, compatibility with ContainerDirectory). */
  containerIdOf(pid: number): string | undefined {
    return this.directory.containerIdOf(pid);
  }
}
