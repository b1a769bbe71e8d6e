/**
 * Privileged: the default `process` set on the real kernel, through the component the agent runs (embedded
 * object, ring buffer pump, process table, status view), and through the perf buffer fallback.
 */
import { describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { mkdirSync, readFileSync, realpathSync, rmdirSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { embeddedObject, openBpfRuntime } from "../../../ffi";
import { EbpfSetComponent } from "../../../src/ebpf/component";
import { EbpfCore } from "../../../src/ebpf/core";
import { FeatureProbes } from "../../../src/ebpf/features";
import { NATIVE_DEPS } from "../../../src/ebpf";
import { DEFAULT_AUTO_RINGBUF_BYTES, loadProgramSet } from "../../../src/ebpf/loader";
import { PROCESS_SET } from "../../../src/ebpf/sets/process";
import { WAITING_POLL_INTERVAL_MS } from "../../../src/ebpf/pump";
import type { ProcessEvent } from "../../../src/ebpf/sets/process-decoder";
import type { ComponentState } from "../../../src/lifecycle/component";
import { EbpfViewSchema, EBPF_STATUS, type EbpfView } from "../../../src/ebpf/status";
import { testContext } from "../../helpers/fakes/ebpf";
import { expectReleased, until } from "./helpers";
import { firstLine } from "../../helpers/wait";

/** Where cgroup v2 is mounted (/sys/fs/cgroup on unified hosts, /sys/fs/cgroup/unified on hybrid ones). */
function cgroup2Root(): string | undefined {
  return readFileSync("/proc/self/mounts", "utf8").split("\n").map((l) => l.split(" ")).find((f) => f[2] === "cgroup2")?.[1];
}

describe("process set", () => {
  test("the component loads it, the process table learns executable and container id, the view is valid, shutdown releases it", async () => {
    const ctx = testContext();
    const core = new EbpfCore(ctx, NATIVE_DEPS);
    const states: ComponentState[] = [];
    const c = new EbpfSetComponent(core, { spec: PROCESS_SET, onEvent: (e) => core.processes.apply(e), onAttached: () => core.processes.seed() });
    await c.start({ logger: ctx.logger, report: (s, r) => (states.push(s), ctx.status.report(c.id, "ebpf", s, r)) });
    await until(() => states.includes("ok") || states.includes("permanent_error"), "the set to load");
    expect(ctx.status.component(c.id)).toMatchObject({ state: "ok" });
    expect(core.processes.forPid(process.pid)?.pid).toBe(process.pid);

    const root = cgroup2Root();
    if (!root) throw new Error("cgroup v2 is not mounted: this machine should have it");
    const containerId = randomBytes(32).toString("hex");
    const cg = join(root, "svc-agent-test", containerId);
    mkdirSync(cg, { recursive: true });
    let pid = 0;
    try {
      const child = Bun.spawn(["/bin/sh", "-c", `echo $$ > ${cg}/cgroup.procs && exec /bin/sleep 0.3`]);
      pid = child.pid;
      await until(() => core.processes.forPid(pid)?.executableName === "sleep", "the exec of sleep in the process table");
      expect(core.processes.forPid(pid)).toMatchObject({ executable: realpathSync("/bin/sleep"), comm: "sleep", containerId, exitedAtNs: undefined });
      expect(core.processes.forPid(pid)!.cgroupId).toBeGreaterThan(0n);
      await child.exited;
      await until(() => core.processes.forPid(pid)?.exitedAtNs !== undefined, "the exit in the process table");

      // A subshell is a fork without exec: the fork event puts it in the table with its parent's image and container.
      const shell = Bun.spawn(["/bin/sh", "-c", `echo $$ > ${cg}/cgroup.procs && exec /bin/sh -c '( while :; do sleep 0.05; done ) & echo $!; wait'`], { stdout: "pipe" });
      const sub = Number(await firstLine(shell.stdout));
      expect(sub).toBeGreaterThan(0);
      try {
        await until(() => core.processes.forPid(sub) !== undefined, "the forked subshell in the process table");
        const parent = core.processes.forPid(shell.pid)!;
        expect(core.processes.forPid(sub)!.image).toBe(parent.image);
        expect(core.processes.forPid(sub)).toMatchObject({ ppid: shell.pid, executableName: parent.executableName, containerId });
      } finally {
        process.kill(sub, "SIGKILL");
        shell.kill();
        await shell.exited;
        await until(() => readFileSync(join(cg, "cgroup.procs"), "utf8").trim() === "", "the test cgroup to be empty");
      }
    } finally {
      rmdirSync(cg);
      rmdirSync(join(root, "svc-agent-test"));
    }

    core.refresh();
    await core.sweepMaps();
    const view = ctx.status.view<EbpfView>(EBPF_STATUS.name)!;
    expect(Value.Check(EbpfViewSchema, view)).toBe(true);
    expect(view.programs.map((p) => [p.name, p.type, p.attached])).toEqual([["handle_exec", "tracepoint", true], ["handle_exit", "tracepoint", true], ["handle_fork", "tp_btf", true]]);
    // ringbuf_size: auto (the default): the process set's ring has the default automatic size.
    expect(view.ringbuf.size).toBe(DEFAULT_AUTO_RINGBUF_BYTES);
    expect(view.ringbuf.events_received).toBeGreaterThanOrEqual(2);
    expect(view.ringbuf.events_lost).toBe(0);
    expect(view.maps.find((m) => m.name === "process/events")).toEqual({ name: "process/events", type: "ringbuf", entries: 0, max_entries: DEFAULT_AUTO_RINGBUF_BYTES });
    expect(await ctx.metrics.registry.metrics()).toContain("svc_ebpf_programs_loaded 3");

    const ids = view.programs.map((p) => p.id);
    await c.shutdown(AbortSignal.timeout(5000));
    core.close();
    await expectReleased(ids);
  });

  test("a quiet ring is waited on, not polled; the kernel wakes the wait once a burst fills a sixteenth of it", async () => {
    const ctx = testContext();
    // Waits that only the kernel (or the ticker's fallback timer) ends: no timeout.
    const core = new EbpfCore(ctx, { ...NATIVE_DEPS, openRingWaiter: () => NATIVE_DEPS.openRingWaiter!(600_000) });
    const states: ComponentState[] = [];
    const c = new EbpfSetComponent(core, { spec: PROCESS_SET, onEvent: (e) => core.processes.apply(e), onAttached: () => core.processes.seed() });
    await c.start({ logger: ctx.logger, report: (s, r) => (states.push(s), ctx.status.report(c.id, "ebpf", s, r)) });
    try {
      await until(() => states.includes("ok") || states.includes("permanent_error"), "the set to load");
      expect(ctx.status.component(c.id)).toMatchObject({ state: "ok" });
      await until(() => core.ticker.waiting, "the ticker to wait for records", 30_000);
      expect(core.ticker.intervalMs).toBe(WAITING_POLL_INTERVAL_MS);
      // One exec: far below the wakeup share, read by a later poll (the fallback timer here) all the same.
      const one = Bun.spawn(["/bin/true"]);
      await one.exited;
      await until(() => core.processes.forPid(one.pid)?.executableName === "true", "the exec of true in the process table", 10_000);
      // A burst: 300 processes, 3 records each (fork, exec, exit) of 320 bytes, over a sixteenth of the 1 MiB ring.
      const wakeups = core.ticker.wakeups;
      const burst = Bun.spawn(["/bin/sh", "-c", "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done; echo $$"], { stdout: "pipe" });
      await burst.exited;
      await until(() => core.ticker.wakeups > wakeups, "the kernel's wakeup of the wait", 10_000);
      // What came after the wakeup's drain (the shell's own exit) is read at a later poll.
      await until(() => core.processes.forPid(burst.pid)?.exitedAtNs !== undefined, "the burst's shell's exit in the process table", 10_000);
    } finally {
      await c.shutdown(AbortSignal.timeout(5000));
      core.close();
    }
  });

  test("perf buffer fallback (as on kernels < 5.8) delivers the same events", async () => {
    const runtime = await openBpfRuntime(process.env);
    const out = await loadProgramSet(PROCESS_SET, {
      runtime,
      probes: new FeatureProbes(runtime),
      objectBytes: embeddedObject,
      ringbufSizeBytes: 1 << 20,
      useRingbuf: false,
    });
    if (!out.ok) throw out.error;
    try {
      expect(out.set.readers.map((r) => [r.map, r.kind])).toEqual([["events_perf", "perfbuf"]]);
      const child = Bun.spawnSync(["/bin/true"]);
      const events: ProcessEvent[] = [];
      const b = out.set.readers[0]!;
      await until(() => {
        b.reader.consume((v, o, len) => events.push(b.decode(v, o, len) as ProcessEvent));
        return events.some((e) => e.pid === child.pid && e.kind === "exit");
      }, "exec and exit of /bin/true through the perf buffer");
      expect(events.find((e) => e.pid === child.pid && e.kind === "exec")?.filename).toBe("/bin/true");
      expect(b.reader.lostReported).toBe(0);
    } finally {
      const ids = out.set.programs.map((p) => p.id);
      out.set.close();
      await expectReleased(ids);
    }
  });
});
