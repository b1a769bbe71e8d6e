/**
 * The NVML binding and the GPU collector against a stand-in libnvidia-ml built here from
 * test/fixtures/nvml-stub.c (these machines have no GPU: no real NVML was tried).
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NvmlError, NvmlUnavailableError, openNvml } from "../../../ffi/nvml";
import { GpuCollector } from "../../../src/collectors/gpu";
import type { GaugePointItem } from "../../../src/export/model";
import type { Component } from "../../../src/lifecycle/component";
import { fakeContext, recordingHost } from "../../helpers/fakes/collectors";

const FIXTURE = join(import.meta.dir, "../../fixtures/nvml-stub.c");
const libs: Record<string, string> = {};

beforeAll(() => {
  const dir = mkdtempSync(join(tmpdir(), "svc-nvml-"));
  for (const [variant, flags] of [
    ["ok", []], ["nodriver", ["-DSTUB_NO_DRIVER"]], ["nodevices", ["-DSTUB_NO_DEVICES"]], ["nomemv2", ["-DSTUB_NO_MEMORY_V2"]], ["memv2mismatch", ["-DSTUB_MEMORY_V2_MISMATCH"]],
  ] as const) {
    const out = join(dir, `libnvml-${variant}.so`);
    const r = Bun.spawnSync(["gcc", "-shared", "-fPIC", "-O1", ...flags, "-o", out, FIXTURE]);
    if (r.exitCode !== 0) throw new Error(`gcc failed: ${r.stderr.toString()}`);
    libs[variant] = out;
  }
});

const enabled = (library: string) => `agent:\n  gpu:\n    enabled: true\n    interval: 1h\n    library: ${library}\n`;

describe("NVML binding (stand-in library)", () => {
  test("reads every value of a device, including a process list longer than the first buffer", () => {
    using nvml = openNvml(libs.ok!);
    expect(nvml.deviceCount()).toBe(2);
    const r = nvml.readDevice(0);
    expect(r).toMatchObject({
      index: 0, name: "Stand-in GPU 0", uuid: "GPU-00000000-1111-2222-3333-444444444444",
      utilizationPercent: 37, memoryUtilizationPercent: 12, memoryUsedBytes: 3072 * 2 ** 20, memoryReservedBytes: 480 * 2 ** 20, memoryTotalBytes: 16384 * 2 ** 20, memoryInfoVersion: 2,
      temperatureCelsius: 61, powerWatts: 123.456, errors: {},
    });
    const compute = r.processes.filter((p) => p.kind === "compute");
    expect(compute).toHaveLength(40);
    expect(compute[0]).toEqual({ pid: 2000, usedMemoryBytes: 2 ** 20, kind: "compute" });
    expect(compute[39]!.usedMemoryBytes).toBeUndefined();
    expect(r.processes.filter((p) => p.kind === "graphics")).toEqual([{ pid: 1, usedMemoryBytes: 64 * 2 ** 20, kind: "graphics" }]);
  });

  test("memory: the v2 call keeps the driver's reserved memory out of used; without it (or refused) the v1 call counts it as used", () => {
    using v2 = openNvml(libs.ok!);
    // Device 1 is idle: 0 used, as nvidia-smi says, with 480 MiB reserved.
    expect(v2.readDevice(1)).toMatchObject({ memoryUsedBytes: 0, memoryReservedBytes: 480 * 2 ** 20, memoryTotalBytes: 16384 * 2 ** 20, memoryInfoVersion: 2 });
    for (const variant of ["nomemv2", "memv2mismatch"]) {
      using v1 = openNvml(libs[variant]!);
      for (const index of [0, 1]) {
        const r = v1.readDevice(index);
        expect(r).toMatchObject({ memoryUsedBytes: (index === 0 ? 3072 + 480 : 480) * 2 ** 20, memoryTotalBytes: 16384 * 2 ** 20, memoryInfoVersion: 1 });
        expect(r.memoryReservedBytes).toBeUndefined();
        expect(r.errors.memory).toBeUndefined();
      }
    }
  });

  test("maps NVML return codes to typed errors per field and per call", () => {
    using nvml = openNvml(libs.ok!);
    const r = nvml.readDevice(1);
    expect(r.temperatureCelsius).toBeUndefined();
    expect(r.errors.temperature).toBeInstanceOf(NvmlError);
    expect(r.errors.temperature!.code).toBe("NVML_ERROR_NO_PERMISSION");
    expect(r.errors.temperature!.message).toBe("nvmlDeviceGetTemperature failed: NVML_ERROR_NO_PERMISSION: Insufficient Permissions");
    expect(r.errors.power!.code).toBe("NVML_ERROR_NOT_SUPPORTED");
    expect(r.errors.compute_processes!.result).toBe(3);
    expect(r.memoryTotalBytes).toBe(16384 * 2 ** 20);
    expect(() => nvml.readDevice(7)).toThrow("nvmlDeviceGetHandleByIndex_v2 failed: NVML_ERROR_INVALID_ARGUMENT");
  });

  test("a failing nvmlInit and a missing library are typed errors", () => {
    expect(() => openNvml(libs.nodriver!)).toThrow(NvmlError);
    expect(() => openNvml(libs.nodriver!)).toThrow("nvmlInit_v2 failed: NVML_ERROR_DRIVER_NOT_LOADED: Driver Not Loaded");
    expect(() => openNvml("/nonexistent/libnvidia-ml.so.1")).toThrow(NvmlUnavailableError);
    expect(() => openNvml("/nonexistent/libnvidia-ml.so.1")).toThrow("NVML library /nonexistent/libnvidia-ml.so.1 not found");
  });

  test("a bare name is searched in LD_LIBRARY_PATH and library directories, never in the current directory", () => {
    const dir = libs.ok!.slice(0, libs.ok!.lastIndexOf("/"));
    const name = libs.ok!.slice(dir.length + 1);
    using viaPath = openNvml(name, { LD_LIBRARY_PATH: dir });
    expect(viaPath.deviceCount()).toBe(2);
    const cwd = process.cwd();
    process.chdir(dir);
    try {
      expect(() => openNvml(name, {})).toThrow(`NVML library ${name} not found: no such file in`);
    } finally {
      process.chdir(cwd);
    }
  });
});

describe("GPU collector", () => {
  test("exports device and per-process metrics, process points labelled with their workload", async () => {
    const ctx = fakeContext(enabled(libs.ok!), undefined, { 2000: { "k8s.pod.name": "trainer" } });
    const c = new GpuCollector(ctx, { open: openNvml });
    const host = recordingHost();
    await c.start(host);
    await c.shutdown();
    const points = ctx.pipeline.accepted.metrics as GaugePointItem[];
    const one = (name: string, index = 0) => points.find((p) => p.name === name && p.attributes?.["gpu.index"] === index);
    expect(one("gpu.utilization")).toMatchObject({ type: "gauge", value: 0.37, unit: "1", attributes: { "gpu.uuid": "GPU-00000000-1111-2222-3333-444444444444", "gpu.name": "Stand-in GPU 0" } });
    expect(one("gpu.memory.used")!.value).toBe(3072 * 2 ** 20);
    expect(one("gpu.memory.used", 1)!.value).toBe(0);
    expect(one("gpu.memory.reserved")!.value).toBe(480 * 2 ** 20);
    expect(one("gpu.memory.total")!.value).toBe(16384 * 2 ** 20);
    expect(one("gpu.temperature")!.value).toBe(61);
    expect(one("gpu.power")!.value).toBe(123.456);
    expect(one("gpu.processes")!.value).toBe(41);
    const proc = points.filter((p) => p.name === "gpu.process.memory.used");
    expect(proc).toHaveLength(40); // 39 compute with a known size + 1 graphics
    expect(proc.find((p) => p.attributes?.["process.pid"] === 2000)!.resource).toEqual({ "k8s.pod.name": "trainer" });
    expect(one("gpu.temperature", 1)).toBeUndefined();
    expect(one("gpu.memory.total", 1)!.value).toBe(16384 * 2 ** 20);
    // Device 1's NO_PERMISSION is reported; its NOT_SUPPORTED fields are not problems.
    expect(host.last().state).toBe("recoverable_error");
    expect(host.last().reason).toBe("device 1 temperature: nvmlDeviceGetTemperature failed: NVML_ERROR_NO_PERMISSION: Insufficient Permissions");
  });

  test("a flush takes a reading at once (interval 1h); none after shutdown, none when disabled", async () => {
    const ctx = fakeContext(enabled(libs.ok!));
    const c = new GpuCollector(ctx, { open: openNvml });
    await c.start(recordingHost());
    const used = () => (ctx.pipeline.accepted.metrics as GaugePointItem[]).filter((p) => p.name === "gpu.memory.used" && p.attributes?.["gpu.index"] === 0).length;
    expect(used()).toBe(1);
    await ctx.pipeline.flush();
    expect(used()).toBe(2);
    await c.shutdown();
    await ctx.pipeline.flush();
    expect(used()).toBe(2);
    const off = fakeContext("");
    await new GpuCollector(off, { open: openNvml }).start(recordingHost());
    await off.pipeline.flush();
    expect(off.pipeline.accepted.metrics).toHaveLength(0);
  });

  test("a driver without nvmlDeviceGetMemoryInfo_v2: used includes the reserved memory, no gpu.memory.reserved", async () => {
    const ctx = fakeContext(enabled(libs.nomemv2!));
    const c = new GpuCollector(ctx, { open: openNvml });
    await c.start(recordingHost());
    await c.shutdown();
    const points = ctx.pipeline.accepted.metrics as GaugePointItem[];
    expect(points.find((p) => p.name === "gpu.memory.used" && p.attributes?.["gpu.index"] === 1)!.value).toBe(480 * 2 ** 20);
    expect(points.filter((p) => p.name === "gpu.memory.reserved")).toEqual([]);
  });

  test("no library, no driver, no devices: the reason is reported, nothing is exported", async () => {
    for (const [library, reason] of [
      ["libnvidia-ml-absent.so.1", "NVML library libnvidia-ml-absent.so.1 not found"],
      [libs.nodriver!, "nvmlInit_v2 failed: NVML_ERROR_DRIVER_NOT_LOADED"],
      [libs.nodevices!, "no NVIDIA GPU: NVML"],
    ] as const) {
      const ctx = fakeContext(enabled(library));
      const c = new GpuCollector(ctx, { open: openNvml });
      const host = recordingHost();
      await c.start(host);
      await c.shutdown();
      expect(host.last().state).toBe("recoverable_error");
      expect(host.last().reason).toContain(reason);
      expect(ctx.pipeline.accepted.metrics).toHaveLength(0);
    }
  });

  const hasRealNvml = existsSync("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
  test.skipIf(hasRealNvml)("the real default library is absent on this machine and reported as such; disabled reports disabled; no readiness check", async () => {
    const ctx = fakeContext("agent:\n  gpu:\n    enabled: true\n    interval: 1h\n");
    const c = new GpuCollector(ctx, { open: openNvml });
    const host = recordingHost();
    await c.start(host);
    await c.shutdown();
    expect(host.last().reason).toStartWith("NVML library libnvidia-ml.so.1 not found");
    const off = new GpuCollector(fakeContext(""), { open: openNvml });
    const h2 = recordingHost();
    await off.start(h2);
    expect(h2.last().state).toBe("disabled");
    expect((c as Component).readiness).toBeUndefined();
  });
});
