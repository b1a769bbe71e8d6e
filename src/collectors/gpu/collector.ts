/** The GPU collector: opens NVML (retrying while it cannot), reads each device per interval, submits metric points. */
import type { AgentContext } from "../context";
import type { Config } from "../../config/schema";
import { msOf } from "../../config/units";
import type { GaugePointItem, Scope } from "../../export/model";
import type { Attributes } from "../../export/types";
import type { Component, ComponentHost } from "../../lifecycle/component";
import { NVML_ERROR_NOT_SUPPORTED, openNvml, type GpuReading, type NvmlApi } from "../../../ffi/nvml";
import { gpuOf } from "./config";

export const GPU_SCOPE: Scope = { name: "svc-agent/gpu" };
const NS_PER_MS = 1_000_000n;

export interface GpuCollectorDeps {
  /** Opens NVML from a library name or path (ffi/nvml.ts `openNvml`; tests may pass a fake). */
  open(library: string): NvmlApi;
}

/** The metric points of one device reading (pure). Process points carry the workload attributes `resourceOf(pid)` gives. */
export function gpuMetricPoints(r: GpuReading, timeUnixNano: bigint, resourceOf: (pid: number) => Attributes | undefined): GaugePointItem[] {
  const device: Attributes = { "gpu.index": r.index, "gpu.uuid": r.uuid, "gpu.name": r.name };
  const points: GaugePointItem[] = [];
  const gauge = (name: string, unit: string, description: string, value: number | undefined, integer: boolean, attributes = device) => {
    if (value === undefined) return;
    points.push({ type: "gauge", scope: GPU_SCOPE, name, unit, description, value, integer, attributes, timeUnixNano });
  };
  gauge("gpu.utilization", "1", "Fraction of time a kernel ran on the GPU over the driver's last sample period.", pct(r.utilizationPercent), false);
  gauge("gpu.memory.utilization", "1", "Fraction of time device memory was read or written.", pct(r.memoryUtilizationPercent), false);
  gauge("gpu.memory.used", "By", "Device memory in use by allocations; the driver's reserved memory is gpu.memory.reserved (drivers before R510, without nvmlDeviceGetMemoryInfo_v2, count it here).", r.memoryUsedBytes, true);
  gauge("gpu.memory.reserved", "By", "Device memory reserved by the driver and firmware, not available to allocations.", r.memoryReservedBytes, true);
  gauge("gpu.memory.total", "By", "Device memory installed.", r.memoryTotalBytes, true);
  gauge("gpu.temperature", "Cel", "GPU core temperature.", r.temperatureCelsius, true);
  gauge("gpu.power", "W", "Power drawn by the device.", r.powerWatts, false);
  if (!r.errors.compute_processes || !r.errors.graphics_processes) gauge("gpu.processes", "{process}", "Processes using the GPU.", r.processes.length, true);
  for (const p of r.processes) {
    if (p.usedMemoryBytes === undefined) continue;
    const attributes = { ...device, "process.pid": p.pid, "gpu.process.kind": p.kind };
    const before = points.length;
    gauge("gpu.process.memory.used", "By", "GPU memory used by a process.", p.usedMemoryBytes, true, attributes);
    const resource = resourceOf(p.pid);
    if (resource && points.length > before) points[before]!.resource = resource;
  }
  return points;
}

function pct(v: number | undefined): number | undefined {
  return v === undefined ? undefined : v / 100;
}

export class GpuCollector implements Component {
  readonly id = "collector/gpu";
  readonly #ctx: AgentContext;
  readonly #deps: GpuCollectorDeps;
  #host: ComponentHost | undefined;
  #nvml: NvmlApi | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;
  #endTask: (() => void) | undefined;
  #removeFlushSource: (() => void) | undefined;
  /** The last readings (tests, debugging). */
  lastReadings: GpuReading[] = [];
  /** Metric points submitted so far. */
  pointsSubmitted = 0;

  constructor(ctx: AgentContext, deps: GpuCollectorDeps) {
    this.#ctx = ctx;
    this.#deps = deps;
  }

  async start(host: ComponentHost): Promise<void> {
    this.#host = host;
    this.#begin(this.#ctx.config);
    // A flush (POST /admin/flush) takes a reading now, so that it exports the devices' current state.
    this.#removeFlushSource ??= this.#ctx.pipeline.addFlushSource?.(() => {
      if (this.#timer) this.poll();
    });
  }

  #begin(config: Config): void {
    const c = gpuOf(config);
    if (!c.enabled) {
      this.#host?.report("disabled");
      return;
    }
    this.#endTask = this.#ctx.tasks.begin("collector/gpu poller");
    this.#timer = setInterval(() => this.poll(config), msOf(c, "interval"));
    this.poll(config);
  }

  /** One reading of every device; reports the component's state. Exposed for tests. */
  poll(config: Config = this.#ctx.config): void {
    const host = this.#host;
    if (!host) return;
    const library = gpuOf(config).library;
    if (!this.#nvml) {
      try {
        this.#nvml = this.#deps.open(library);
        host.logger.info("NVML opened", { library });
      } catch (e) {
        host.report("recoverable_error", (e as Error).message);
        return;
      }
    }
    const nvml = this.#nvml;
    let count: number;
    try {
      count = nvml.deviceCount();
    } catch (e) {
      host.report("recoverable_error", (e as Error).message);
      return;
    }
    if (count === 0) {
      host.report("recoverable_error", `no NVIDIA GPU: NVML (${library}) reports 0 devices`);
      return;
    }
    const now = BigInt(Date.now()) * NS_PER_MS;
    const readings: GpuReading[] = [];
    const failures: string[] = [];
    const points: GaugePointItem[] = [];
    for (let i = 0; i < count; i++) {
      try {
        const r = nvml.readDevice(i);
        readings.push(r);
        points.push(...gpuMetricPoints(r, now, (pid) => this.#ctx.workloads.forPid(pid)));
        for (const [field, err] of Object.entries(r.errors))
          if (err.result !== NVML_ERROR_NOT_SUPPORTED) failures.push(`device ${i} ${field}: ${err.message}`);
      } catch (e) {
        failures.push(`device ${i}: ${(e as Error).message}`);
      }
    }
    this.lastReadings = readings;
    if (points.length > 0) this.pointsSubmitted += this.#ctx.pipeline.submit("metrics", points);
    if (failures.length > 0) host.report("recoverable_error", failures.join("; "));
    else host.report("ok");
  }

  #stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#endTask?.();
    this.#endTask = undefined;
    this.#nvml?.close();
    this.#nvml = undefined;
  }

  async shutdown(): Promise<void> {
    this.#removeFlushSource?.();
    this.#removeFlushSource = undefined;
    this.#stop();
  }

  async reload(next: Config, previous: Config): Promise<void> {
    if (JSON.stringify(gpuOf(next)) === JSON.stringify(gpuOf(previous))) return;
    this.#stop();
    this.#begin(next);
  }
}

/** The component with the real NVML binding (the library is opened only when the collector is enabled). */
export function createGpuCollector(ctx: AgentContext): GpuCollector {
  return new GpuCollector(ctx, { open: (library) => openNvml(library, ctx.env) });
}
