/**
 * The CPU profile's sampling thread (JavaScriptCore's, which never exits once started) is parked after every
 * profile: left at the profile's 1 ms interval it kept ~1.8% of a core busy for the rest of the process' life.
 * The next profile still covers its whole window at the profile's interval (the lead-in is cut off).
 */
import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { PARKED_INTERVAL_US, sampleCpu, withoutLeadIn } from "../../../src/debug/cpu-profile";

/**
 * Wakeups (voluntary context switches) of this process' threads named `thread` (the sampling thread's name under
 * Bun): the sampling thread sleeps one interval between samples, so its wakeups count its interval exactly where
 * clock ticks (10 ms each, charged to whatever runs at the tick) only sample its CPU.
 */
function samplerWakeups(): number {
  let n = 0;
  for (const t of readdirSync("/proc/self/task")) {
    try {
      if (readFileSync(`/proc/self/task/${t}/comm`, "utf8").trim() !== "thread") continue;
      n += Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(readFileSync(`/proc/self/task/${t}/status`, "utf8"))?.[1] ?? 0);
    } catch {
      // the thread ended meanwhile
    }
  }
  return n;
}

function busy(ms: number): void {
  const end = performance.now() + ms;
  let x = 0;
  while (performance.now() < end) x += Math.sqrt(x + 1);
}

test("after a profile the sampling thread is parked; the next profile samples its whole window", async () => {
  const first = sampleCpu(0.3);
  busy(200);
  await first;
  // Parked, the thread wakes every PARKED_INTERVAL_US (20 times a second); left at the profile's 1 ms, about
  // 1,000 times (3-4 clock ticks of CPU per 2 s idle).
  const before = samplerWakeups();
  await Bun.sleep(1000);
  const wakeups = samplerWakeups() - before;
  expect(wakeups).toBeGreaterThan(0);
  expect(wakeups).toBeLessThanOrEqual((4 * 1e6) / PARKED_INTERVAL_US);

  const second = sampleCpu(0.4);
  await Bun.sleep(80); // past the lead-in (55 ms), inside the window
  busy(300);
  const p = await second;
  // Busy 300 ms inside the window: sampled at the profile's interval again (300 at 1 ms; idle time is not sampled).
  expect(p.samples!.length).toBeGreaterThan(150);
  expect(p.startTime).toBeGreaterThan(0);
});

test("withoutLeadIn keeps the samples from the window's start on, with deltas from it", () => {
  const p = { nodes: [], startTime: 1000, endTime: 9000, samples: [1, 2, 3, 4], timeDeltas: [100, 200, 300, 400] };
  // Sample times 1100, 1300, 1600, 2000; window from 1250.
  expect(withoutLeadIn(p, 250)).toEqual({ nodes: [], startTime: 1250, endTime: 9000, samples: [2, 3, 4], timeDeltas: [50, 300, 400] });
  expect(withoutLeadIn(p, 0)).toBe(p);
});
