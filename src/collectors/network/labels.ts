/**
 * Process and workload attributes for what the network and syscall collectors emit, from the eBPF core's
 * process table (process.executable.name, container.id) and discovery (container.*, k8s.*, as the item's
 * resource). Bounded by those caches; synchronous.
 */
import type { Attributes } from "../../export/types";
import { UNKNOWN_WORKLOAD } from "../../workloads/identity";

/** What the collectors need of the eBPF process table (ProcessTable satisfies it). */
export interface ProcessLookup {
  forPid(pid: number): { executableName: string; containerId: string | undefined } | undefined;
}

/** What the collectors need of discovery (WorkloadDirectory satisfies it). */
export interface WorkloadLookup {
  forPid(pid: number): Attributes | undefined;
}

export interface ProcessLabels {
  /** Bounded label for metrics: the executable name (or the kernel task name). */
  name: string;
  /** process.pid, process.executable.name, container.id when known. */
  attributes: Attributes;
  /** The workload's resource (src/workloads; same object for the same workload); undefined for the agent itself. */
  resource: Attributes | undefined;
}

const UNKNOWN_PROCESS = "unknown";
/** Labels kept per pid (emptied when full): most records come from few processes. */
const MAX_CACHED_PIDS = 16_384;

/** The labels of pid 0 (a process never seen). */
const UNKNOWN_LABELS: ProcessLabels = { name: UNKNOWN_PROCESS, attributes: { "process.executable.name": UNKNOWN_PROCESS }, resource: UNKNOWN_WORKLOAD };

interface CachedLabels {
  /** What the labels were made from: the process table's entry, the task name and the workload resource. */
  info: { executableName: string; containerId: string | undefined } | undefined;
  comm: string;
  resource: Attributes | undefined;
  labels: ProcessLabels;
}

export class ProcessLabeler {
  readonly #cache = new Map<number, CachedLabels>();

  constructor(
    private readonly processes: ProcessLookup | undefined,
    private readonly workloads: WorkloadLookup | undefined,
  ) {}

  /**
   * Labels of process `pid` whose kernel task name is `comm` (pid 0: the process was never seen). The same object
   * while the process table's entry, the task name (when it names the process) and the workload resource stay the
   * same: callers copy what they extend, never modify it.
   */
  describe(pid: number, comm: string): ProcessLabels {
    if (pid === 0) return UNKNOWN_LABELS;
    const info = this.processes?.forPid(pid);
    let resource: Attributes | undefined;
    try {
      resource = this.workloads?.forPid(pid);
    } catch {
      resource = undefined;
    }
    const cached = this.#cache.get(pid);
    if (cached !== undefined && cached.info === info && cached.resource === resource && (cached.comm === comm || info?.executableName)) return cached.labels;
    const name = info?.executableName || comm || UNKNOWN_PROCESS;
    const attributes: Attributes = { "process.pid": pid, "process.executable.name": name };
    if (info?.containerId) attributes["container.id"] = info.containerId;
    const labels = { name, attributes, resource };
    if (this.#cache.size >= MAX_CACHED_PIDS) this.#cache.clear();
    this.#cache.set(pid, { info, comm, resource, labels });
    return labels;
  }
}
