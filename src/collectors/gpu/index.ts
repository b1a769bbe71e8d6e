/**
 * GPU monitoring (`collector/gpu`, config `agent.gpu`): NVIDIA devices through NVML (ffi/nvml.ts), read every
 * `agent.gpu.interval` and exported as OTLP metrics: utilisation, memory used/reserved/total, temperature, power, and
 * the GPU memory of each process using a device. Without NVML or devices the component says why
 * (recoverable_error, retried every interval) and nothing else is affected: it feeds no readiness check.
 */
export { GpuCollector, createGpuCollector, GPU_SCOPE, gpuMetricPoints, type GpuCollectorDeps } from "./collector";
