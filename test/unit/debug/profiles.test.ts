/** Pure parts of the debug profiles: profile.proto building, stack parsing, CPU profile conversion, runtime profiles. */
import { describe, expect, jest, test } from "bun:test";
import { gunzipSync } from "node:zlib";
import { Profile } from "pprof-format";
import { cpuProfileToPprof, reserveProfiler, ProfilerBusyError, type InspectorProfile } from "../../../src/debug/cpu-profile";
import { parseStack, PprofBuilder } from "../../../src/debug/pprof";
import { DebugRuntime } from "../../../src/debug/runtime";
import { blockProfile, goroutineCountsText, goroutineProfile, goroutineStacksText, mutexProfile } from "../../../src/debug/runtime-profiles";
import { Mutex } from "../../../src/lifecycle/mutex";
import { TaskRegistry } from "../../../src/telemetry/tasks";
import { advanceTimersByTime, flushPromises } from "../../helpers/fake-timers";

function decode(b: PprofBuilder) {
  const p = Profile.decode(gunzipSync(b.encode()));
  const s = (i: number | bigint) => p.stringTable.strings[Number(i)]!;
  const fnName = (locId: number | bigint) => {
    const loc = p.location.find((l) => l.id === locId)!;
    const fn = p.function.find((f) => f.id === loc.line[0]!.functionId)!;
    return { name: s(fn.name), file: s(fn.filename), line: Number(loc.line[0]!.line) };
  };
  return { p, s, fnName, stacks: p.sample.map((x) => ({ frames: x.locationId.map(fnName), values: x.value.map(Number) })) };
}

describe("PprofBuilder", () => {
  test("round-trips through the pprof-format decoder with deduplicated functions and locations", () => {
    const b = new PprofBuilder({ sampleTypes: [["samples", "count"], ["cpu", "nanoseconds"]], periodType: ["cpu", "nanoseconds"], period: 1000, defaultSampleType: "cpu" });
    const leaf = { name: "hot", file: "src/a.ts", line: 10, startLine: 9 };
    b.add([leaf, { name: "main", file: "src/main.ts", line: 3 }], [2, 2000]);
    b.add([leaf], [1, 1000], { kind: "x", n: 5 });
    b.comment("hello");
    const { p, s, stacks } = decode(b);
    expect(p.sampleType.map((t) => `${s(t.type)}/${s(t.unit)}`)).toEqual(["samples/count", "cpu/nanoseconds"]);
    expect(s(p.defaultSampleType)).toBe("cpu");
    expect(p.function.length).toBe(2);
    expect(p.location.length).toBe(2);
    expect(stacks[0]).toEqual({ frames: [{ name: "hot", file: "src/a.ts", line: 10 }, { name: "main", file: "src/main.ts", line: 3 }], values: [2, 2000] });
    expect(p.sample[1]!.label.map((l) => s(l.key))).toEqual(["kind", "n"]);
    expect(p.comment.map(s)).toEqual(["hello"]);
  });

  test("refuses a sample with the wrong number of values", () => {
    const b = new PprofBuilder({ sampleTypes: [["goroutine", "count"]] });
    expect(() => b.add([{ name: "x" }], [1, 2])).toThrow();
  });
});

test("parseStack reads JavaScript stack lines, leaf first", () => {
  const frames = parseStack("    at foo (/a/b.ts:3:4)\n    at <anonymous> (/c.ts:1:2)\n    at /d.ts:7:8\n    at native");
  expect(frames).toEqual([
    { name: "foo", file: "/a/b.ts", line: 3, startLine: 0 },
    { name: "(anonymous)", file: "/c.ts", line: 1, startLine: 0 },
    { name: "(anonymous)", file: "/d.ts", line: 7, startLine: 0 },
    { name: "native" },
  ]);
});

test("cpuProfileToPprof: stacks from the call tree, counts and cpu time per leaf, 1-based lines", () => {
  const cf = (functionName: string, lineNumber: number) => ({ functionName, url: "file:///src/x.ts", lineNumber, columnNumber: 0 });
  const inspector: InspectorProfile = {
    nodes: [
      { id: 1, callFrame: cf("(root)", -1), children: [2] },
      { id: 2, callFrame: cf("outer", 4), children: [3] },
      { id: 3, callFrame: cf("inner", 9) },
    ],
    startTime: 0,
    endTime: 10_000,
    samples: [3, 3, 2],
    timeDeltas: [1000, 1000, 1000],
  };
  const { stacks } = decode(cpuProfileToPprof(inspector, 1000));
  const byLeaf = Object.fromEntries(stacks.map((x) => [x.frames[0]!.name, x]));
  expect(byLeaf.inner!.values).toEqual([2, 2_000_000]);
  expect(byLeaf.inner!.frames.map((f) => f.name)).toEqual(["inner", "outer"]);
  expect(byLeaf.inner!.frames[0]!.line).toBe(10);
  expect(byLeaf.outer!.values).toEqual([1, 1_000_000]);
});

test("one profiler reservation at a time", () => {
  const release = reserveProfiler("CPU profile", 1000);
  expect(() => reserveProfiler("CPU profile", 1000)).toThrow(ProfilerBusyError);
  release();
  reserveProfiler("CPU profile", 1000)();
});

describe("runtime profiles", () => {
  test("goroutine: the event loop plus every live unit with its creation stack; text forms", () => {
    const tasks = new TaskRegistry();
    tasks.captureStacks = true;
    const end = tasks.begin("worker A");
    tasks.begin("http GET /x", "operation");
    const { stacks } = decode(goroutineProfile(tasks));
    expect(stacks.length).toBe(3);
    const worker = stacks.find((s) => s.frames[0]!.name === "worker A")!;
    expect(worker.frames.length).toBeGreaterThan(1);
    expect(worker.frames.some((f) => f.file.endsWith("profiles.test.ts"))).toBe(true);
    expect(goroutineCountsText(tasks)).toStartWith("goroutine profile: total 3\n");
    const text = goroutineStacksText(tasks);
    expect(text).toContain("worker A");
    expect(text).toContain("profiles.test.ts");
    end();
    expect(decode(goroutineProfile(tasks)).stacks.length).toBe(2);
  });

  test("mutex: contended reload lock waits as contentions and delay; nothing contended is an empty profile with comments", async () => {
    const lock = new Mutex("reload");
    const empty = decode(mutexProfile([lock]));
    expect(empty.p.sample.length).toBe(0);
    expect(empty.p.comment.map(empty.s).join("\n")).toContain("reload lock: 0 contended");
    jest.useFakeTimers();
    try {
      const gate = Promise.withResolvers<void>();
      const first = lock.run(() => gate.promise);
      const second = lock.run(async () => undefined);
      await flushPromises(); // the first caller holds the lock, the second waits
      expect(lock.held).toBe(true);
      advanceTimersByTime(5);
      gate.resolve();
      await Promise.all([first, second]);
    } finally {
      jest.useRealTimers();
    }
    const profile = decode(mutexProfile([lock]));
    expect(profile.stacks.length).toBe(1);
    expect(profile.stacks[0]!.frames[0]!.name).toBe("reload lock wait");
    // One contended acquisition, which waited the 5 ms (fake clock) the first holder kept the lock.
    expect(profile.stacks[0]!.values).toEqual([1, 5_000_000]);
    expect(profile.p.comment.map(profile.s).join("\n")).toContain("reload lock: 1 contended acquisitions, 5.000 ms waited in total");
  });

  test("block: a synchronous block inside an operation is attributed to it", async () => {
    const tasks = new TaskRegistry();
    // A synchronous block: the clock moves 120 ms while no timer runs (fake timers hold the lag probe).
    let blockedMs = 0;
    const runtime = new DebugRuntime(tasks, () => performance.now() + blockedMs);
    jest.useFakeTimers();
    runtime.setEnabled(true);
    try {
      await tasks.track("busy operation", async () => {
        blockedMs += 120;
      });
      expect(runtime.blocks().length).toBe(0);
      advanceTimersByTime(20);
      expect(runtime.blocks().length).toBe(1);
      const { stacks } = decode(blockProfile(runtime));
      const busy = stacks.find((s) => s.frames[0]!.name === "busy operation");
      expect(busy).toBeDefined();
      expect(busy!.values[1]).toBeGreaterThan(50e6);
    } finally {
      runtime.setEnabled(false);
      jest.useRealTimers();
    }
    expect(tasks.captureStacks).toBe(false);
    expect(tasks.observers.size).toBe(0);
  });

  test("trace: begin/end pairs of operations during the window, and only one trace at a time", async () => {
    const tasks = new TaskRegistry();
    const runtime = new DebugRuntime(tasks);
    jest.useFakeTimers();
    runtime.setEnabled(true);
    try {
      let ended = false;
      const pending = runtime.trace(1).finally(() => (ended = true));
      await expect(runtime.trace(1)).rejects.toThrow("only one at a time");
      advanceTimersByTime(250);
      await tasks.track("op inside", async () => undefined);
      // The window is one second of the clock: not over at 999 ms, over at 1000.
      advanceTimersByTime(749);
      await flushPromises();
      expect(ended).toBe(false);
      await tasks.track("op late inside", async () => undefined);
      advanceTimersByTime(1);
      const t = await pending;
      await tasks.track("op after", async () => undefined);
      const mine = t.events.filter((e) => e.name === "op inside");
      expect(mine.map((e) => e.ph)).toEqual(["b", "e"]);
      expect(mine[0]!.id).toBe(mine[1]!.id);
      // Chrome trace timestamps are microseconds from the trace's start.
      expect(mine.map((e) => e.ts)).toEqual([250_000, 250_000]);
      expect(t.events.filter((e) => e.name === "op late inside").map((e) => e.ts)).toEqual([999_000, 999_000]);
      expect(t.events.some((e) => e.name === "op after")).toBe(false);
      // The next trace may start once the window is over.
      const next = runtime.trace(1);
      advanceTimersByTime(1000);
      await next;
    } finally {
      runtime.setEnabled(false);
      jest.useRealTimers();
    }
  });
});
