/**
 * The memory limiter: above the soft limit the gate closes, the pipeline drops submits as memory_limit (offers take
 * nothing), readiness says why; when memory falls below the soft limit again everything is accepted again. Then
 * the same with the process's real resident memory, grown and shrunk by a large buffer. Limits resolve from the
 * configuration and the cgroup.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Value } from "@sinclair/typebox/value";
import type { BaseContext } from "../../../src/lifecycle/context";
import { ConfigSchema, validateDocument, type ConfigDocument } from "../../../src/config/document";
import { OtlpPipeline } from "../../../src/export/pipeline";
import type { ComponentState } from "../../../src/lifecycle/component";
import { Logger } from "../../../src/log/logger";
import { cgroupMemoryLimit, checkDelayMs, DEFAULT_HARD_LIMIT_BYTES, deploymentMemory, GROWTH_PER_CHECK_BYTES, MAX_CHECK_STRETCH, MemoryGate, MemoryLimiter, resolveLimits } from "../../../src/memory";
import { StatusAggregator } from "../../../src/status/aggregator";
import { AgentMetrics } from "../../../src/telemetry/metrics";
import { TaskRegistry } from "../../../src/telemetry/tasks";
import { spans } from "../../integration/export/harness";

const MIB = 2 ** 20;

function context(memoryLimit: Partial<ConfigDocument["agent"]["memory_limit"]>) {
  const config = Value.Default(ConfigSchema, {}) as ConfigDocument;
  config.agent.memory_limit = { ...config.agent.memory_limit, ...memoryLimit };
  const status = new StatusAggregator();
  const tasks = new TaskRegistry();
  const gate = new MemoryGate();
  const ctx: BaseContext = { config, logger: new Logger({ sink: () => undefined }), status, metrics: new AgentMetrics("svc", tasks), tasks, env: {}, memory: gate };
  const states: Array<[ComponentState, string | undefined]> = [];
  const host = {
    logger: ctx.logger,
    report(state: ComponentState, reason?: string) {
      states.push([state, reason]);
      status.report("memory/limiter", "memory", state, reason);
    },
  };
  return { ctx, gate, status, host, states };
}

/** Limiters the tests started, shut down after each test: one whose test failed before its shutdown would keep checking for the rest of the run. */
const running: MemoryLimiter[] = [];
afterEach(async () => {
  for (const l of running.splice(0)) await l.shutdown();
});
function limiterOf(...args: ConstructorParameters<typeof MemoryLimiter>): MemoryLimiter {
  const limiter = new MemoryLimiter(...args);
  running.push(limiter);
  return limiter;
}

const dropped = async (ctx: BaseContext, signal: string) => {
  const text = await ctx.metrics.render();
  return Number(new RegExp(`svc_${signal}_dropped_total\\{reason="memory_limit"\\} (\\d+)`).exec(text)?.[1]);
};

describe("memory limiter", () => {
  test("refuses above the soft limit in the pipeline and in readiness, and recovers when memory falls", async () => {
    const { ctx, gate, status, host } = context({ limit: "100MiB", soft_limit: "80MiB" });
    let rss = 50 * MIB;
    let collections = 0;
    const limiter = limiterOf(ctx, gate, { residentBytes: () => rss, cgroupLimitBytes: () => undefined, collectGarbage: () => collections++ });
    const pipeline = new OtlpPipeline({ config: ctx.config, metrics: ctx.metrics, logger: ctx.logger, gate });
    await limiter.start(host);
    expect(status.readiness().checks.memory).toBe("ok");
    expect(pipeline.submit("traces", spans(1))).toBe(1);

    rss = 85 * MIB;
    expect(limiter.check()).toBe(true);
    expect(gate.refusing).toBe(true);
    expect(pipeline.submit("traces", spans(2))).toBe(0);
    expect(pipeline.offer("logs", [{ body: "x" }])).toBe(0);
    expect(pipeline.room("logs")).toBe(0);
    expect(await dropped(ctx, "spans")).toBe(2);
    const ready = status.readiness();
    expect(ready.ready).toBe(false);
    expect(ready.checks.memory).toStartWith("failed: refusing new data: resident memory 85 MiB at or above the soft limit 80 MiB");
    expect(limiter.view()).toMatchObject({ enabled: true, refusing: true, resident_bytes: 85 * MIB, soft_limit_bytes: 80 * MIB, hard_limit_bytes: 100 * MIB, refusals: 1 });

    // Above the hard limit, garbage is collected at once.
    const before = collections;
    rss = 120 * MIB;
    limiter.check();
    expect(collections).toBeGreaterThan(before);

    rss = 60 * MIB;
    expect(limiter.check()).toBe(false);
    expect(gate.refusing).toBe(false);
    expect(status.readiness().checks.memory).toBe("ok");
    expect(pipeline.submit("traces", spans(1))).toBe(1);
    expect(await dropped(ctx, "spans")).toBe(2);
    expect(limiter.view().refusing).toBe(false);
    await limiter.shutdown();
    await pipeline.shutdown(AbortSignal.timeout(1000));
  });

  test("a refusal is reported when it begins and when its kind changes, not at every check while memory moves", async () => {
    const { ctx, gate, host, states } = context({ limit: "100MiB", soft_limit: "80MiB" });
    let rss = 50 * MIB;
    const limiter = limiterOf(ctx, gate, { residentBytes: () => rss, cgroupLimitBytes: () => undefined, collectGarbage: () => undefined });
    await limiter.start(host);
    states.length = 0;
    for (const mib of [85, 86, 87, 88, 81]) {
      rss = mib * MIB;
      expect(limiter.check()).toBe(true);
    }
    for (const mib of [79, 75]) {
      rss = mib * MIB;
      expect(limiter.check()).toBe(true);
    }
    rss = 60 * MIB;
    expect(limiter.check()).toBe(false);
    expect(states).toEqual([
      ["recoverable_error", "refusing new data: resident memory 85 MiB at or above the soft limit 80 MiB (hard limit 100 MiB)"],
      ["recoverable_error", "refusing new data: resident memory 79 MiB not yet below 90% of the soft limit 80 MiB"],
      ["ok", undefined],
    ]);
    expect(limiter.view()).toMatchObject({ refusing: false, resident_bytes: 60 * MIB, refusals: 1 });
    await limiter.shutdown();
  });

  test("below the limits, garbage is collected once RSS has grown 32 MiB since the last collection, not more often than every 2 s", async () => {
    const { ctx, gate, host } = context({ limit: "1GiB" });
    let rss = 50 * MIB;
    let collections = 0;
    const limiter = limiterOf(ctx, gate, { residentBytes: () => rss, cgroupLimitBytes: () => undefined, collectGarbage: () => collections++ });
    await limiter.start(host);
    limiter.check();
    expect(collections).toBe(0);
    rss = 70 * MIB;
    limiter.check();
    expect(collections).toBe(0);
    rss = 83 * MIB;
    limiter.check();
    expect(collections).toBe(1);
    rss = 130 * MIB;
    limiter.check();
    expect(collections).toBe(1);
    expect(gate.refusing).toBe(false);
    await limiter.shutdown();
  });

  test("checks come every check_interval near the soft limit and while refusing, further apart with headroom", () => {
    const soft = 320 * MIB;
    expect(checkDelayMs(10, soft - GROWTH_PER_CHECK_BYTES / 2, soft, false)).toBe(10);
    expect(checkDelayMs(10, soft + MIB, soft, false)).toBe(10);
    expect(checkDelayMs(10, soft - 3 * GROWTH_PER_CHECK_BYTES, soft, false)).toBe(30);
    expect(checkDelayMs(10, 75 * MIB, soft, false)).toBe(10 * MAX_CHECK_STRETCH);
    expect(checkDelayMs(10, 75 * MIB, soft, true)).toBe(10);
    // Growing at GROWTH_PER_CHECK_BYTES per interval or slower, RSS cannot pass the soft limit before the next check.
    for (let headroom = 0; headroom < 200 * MIB; headroom += 3 * MIB) {
      expect(checkDelayMs(10, soft - headroom, soft, false) / 10 * GROWTH_PER_CHECK_BYTES).toBeLessThanOrEqual(Math.max(GROWTH_PER_CHECK_BYTES, headroom));
    }
  });

  test("the timer's checks close the gate when memory rises from far below the soft limit, and open it again", async () => {
    const { ctx, gate, host } = context({ limit: "400MiB", soft_limit: "320MiB", check_interval: "1ms" });
    let rss = 50 * MIB;
    let reads = 0;
    const limiter = limiterOf(ctx, gate, { residentBytes: () => (reads++, rss), cgroupLimitBytes: () => undefined, collectGarbage: () => undefined });
    await limiter.start(host);
    const until = async (done: () => boolean) => {
      while (!done()) await new Promise((resolve) => setTimeout(resolve, 1));
    };
    const before = reads;
    await until(() => reads > before + 2);
    rss = 330 * MIB;
    await until(() => gate.refusing);
    rss = 50 * MIB;
    await until(() => !gate.refusing);
    await limiter.shutdown();
    const after = reads;
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(reads).toBe(after);
  });

  test("the gate's listeners hear each change once", () => {
    const gate = new MemoryGate();
    const heard: boolean[] = [];
    const off = gate.subscribe((r) => heard.push(r));
    gate.set("a");
    gate.set("b");
    gate.set(undefined);
    gate.set(undefined);
    off();
    gate.set("c");
    expect(heard).toEqual([true, false]);
  });

  test("with the process's real resident memory: a large buffer closes the gate, freeing it opens it again", async () => {
    Bun.gc(true);
    // The buffer is far above the soft limit: pages that earlier tests' garbage still held when `base` was read
    // may go back to the system before the check (measured: more than 64 MiB in a whole-suite run).
    const base = process.memoryUsage.rss();
    const { ctx, gate, host } = context({ limit: base + 640 * MIB, soft_limit: base + 96 * MIB });
    const limiter = limiterOf(ctx, gate, { cgroupLimitBytes: () => undefined });
    await limiter.start(host);
    expect(gate.refusing).toBe(false);
    let big: Uint8Array | undefined = new Uint8Array(384 * MIB).fill(7);
    expect(limiter.check()).toBe(true);
    expect(big[big.length - 1]).toBe(7);
    big = undefined;
    // The limiter collects garbage while refusing; the buffer's pages go back to the system at the collection
    // (an unreferenced 384 MiB buffer is unmapped when collected). A few turns of the event loop at most, no waiting:
    // a reference still on the stack of this turn (the collector scans it conservatively) is gone at the next.
    let refusing = true;
    for (let turn = 0; turn < 5 && refusing; turn++) {
      Bun.gc(true);
      refusing = limiter.check();
      if (refusing) await new Promise<void>((resolve) => setImmediate(resolve));
    }
    expect(refusing).toBe(false);
    expect(gate.refusing).toBe(false);
    await limiter.shutdown();
  });

  test("limits: configured, auto from the cgroup, auto default; the deployment's request and limit follow the defaults", () => {
    const auto = { enabled: true, limit: "auto" as const, soft_limit: "auto" as const, check_interval: "10ms" };
    expect(resolveLimits(auto, undefined)).toEqual({ hardBytes: DEFAULT_HARD_LIMIT_BYTES, softBytes: Math.floor(DEFAULT_HARD_LIMIT_BYTES * 0.8), source: "default" });
    expect(resolveLimits(auto, 1000 * MIB)).toEqual({ hardBytes: 800 * MIB, softBytes: 640 * MIB, source: "cgroup" });
    expect(resolveLimits({ ...auto, limit: "1GiB", soft_limit: "512MiB" }, 100 * MIB)).toEqual({ hardBytes: 1024 * MIB, softBytes: 512 * MIB, source: "configured" });
    const { requestMiB, limitMiB } = deploymentMemory();
    // In a cgroup limited to the DaemonSet's limit, auto gives the default hard limit, and its soft limit is the request.
    const inPod = resolveLimits(auto, limitMiB * MIB);
    expect(Math.abs(inPod.hardBytes - DEFAULT_HARD_LIMIT_BYTES)).toBeLessThan(MIB);
    expect(Math.ceil(inPod.softBytes / MIB)).toBe(requestMiB);
  });

  test("a soft_limit size above the hard limit that limit: auto gave is not used: the auto soft limit is, and a warning names the key", async () => {
    const over = { enabled: true, limit: "auto" as const, soft_limit: "500MiB", check_interval: "10ms" };
    const inCgroup = resolveLimits(over, 250 * MIB);
    expect(inCgroup).toMatchObject({ hardBytes: 200 * MIB, softBytes: 160 * MIB, source: "cgroup" });
    expect(inCgroup.softLimitIgnored).toContain("soft_limit 500 MiB is above the hard limit 200 MiB");
    expect(resolveLimits(over, undefined)).toMatchObject({ hardBytes: DEFAULT_HARD_LIMIT_BYTES, softBytes: Math.floor(DEFAULT_HARD_LIMIT_BYTES * 0.8) });
    // Within the hard limit it is the one in force, and nothing is said.
    const within = resolveLimits({ ...over, soft_limit: "150MiB" }, 250 * MIB);
    expect(within).toEqual({ hardBytes: 200 * MIB, softBytes: 150 * MIB, source: "cgroup" });

    const { ctx, gate, host } = context(over);
    const lines: string[] = [];
    const logged = { ...host, logger: new Logger({ sink: (line) => lines.push(line) }) };
    const limiter = limiterOf(ctx, gate, { residentBytes: () => 50 * MIB, cgroupLimitBytes: () => 250 * MIB, collectGarbage: () => {} });
    await limiter.start(logged);
    expect(limiter.limits.softBytes).toBe(160 * MIB);
    const warnings = lines.map((l) => JSON.parse(l)).filter((r) => r.level === "warn");
    expect(warnings).toEqual([expect.objectContaining({ msg: "agent.memory_limit.soft_limit not used", key: "agent.memory_limit.soft_limit" })]);
    // A reload that keeps the configuration does not say it again.
    await limiter.reload(ctx.config);
    expect(lines.map((l) => JSON.parse(l)).filter((r) => r.level === "warn").length).toBe(1);
  });

  test("bad limits are refused with their key paths", () => {
    const c = Value.Default(ConfigSchema, {}) as ConfigDocument;
    c.agent.memory_limit = { enabled: true, limit: "100MiB", soft_limit: "200MiB", check_interval: "0s" };
    const paths = validateDocument(c).map((p) => p.path);
    expect(paths).toContain("agent.memory_limit.soft_limit");
    expect(paths).toContain("agent.memory_limit.check_interval");
  });

  test("the cgroup's limit: v2 takes the tightest ancestor, v1 ignores its 'unlimited'", () => {
    const root = mkdtempSync(join(tmpdir(), "svc-cgroup-"));
    mkdirSync(join(root, "kubepods/pod1/ctr"), { recursive: true });
    writeFileSync(join(root, "kubepods/memory.max"), "max\n");
    writeFileSync(join(root, "kubepods/pod1/memory.max"), `${500 * MIB}\n`);
    writeFileSync(join(root, "kubepods/pod1/ctr/memory.max"), `${600 * MIB}\n`);
    const self = join(root, "self-v2");
    writeFileSync(self, "0::/kubepods/pod1/ctr\n");
    expect(cgroupMemoryLimit(self, root)).toBe(500 * MIB);
    writeFileSync(self, "0::/kubepods\n");
    expect(cgroupMemoryLimit(self, root)).toBeUndefined();
    mkdirSync(join(root, "memory/docker/abc"), { recursive: true });
    writeFileSync(join(root, "memory/docker/abc/memory.limit_in_bytes"), "9223372036854771712\n");
    writeFileSync(self, "4:memory:/docker/abc\n0::/\n");
    expect(cgroupMemoryLimit(self, root)).toBeUndefined();
    writeFileSync(join(root, "memory/docker/abc/memory.limit_in_bytes"), `${256 * MIB}\n`);
    expect(cgroupMemoryLimit(self, root)).toBe(256 * MIB);
  });
});
