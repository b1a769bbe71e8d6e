/**
 * Privileged: the real `syscalls` program set. A small C program makes exactly N getppid calls and K kill
 * calls that fail (ESRCH); the exported metrics for its pid must say exactly N, K calls and K errors.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { compileC, startTracingAgent, until, type TracingAgent } from "../network/harness";

setDefaultTimeout(40_000);

const GETPPID_CALLS = 54_321;
const FAILING_KILLS = 777;
const PROGRAM = `
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
  for (int i = 0; i < ${GETPPID_CALLS}; i++) syscall(SYS_getppid);
  for (int i = 0; i < ${FAILING_KILLS}; i++) syscall(SYS_kill, 0x7ffffff0, 0);
  return 0;
}
`;

let t: TracingAgent;
let pid = 0;

beforeAll(async () => {
  const calls = compileC("calls", PROGRAM);
  t = await startTracingAgent(`    network:
      enabled: false
    syscalls:
      enabled: true
      interval: 1s
      top_processes: 50`);
  await until(() => t.agent.agent.status.component("ebpf/syscalls")?.state === "ok", "ebpf/syscalls ok", 30_000);
  const p = Bun.spawn([calls], { stdout: "ignore", stderr: "inherit" });
  pid = p.pid;
  expect(await p.exited).toBe(0);
});

afterAll(async () => {
  await t?.stop();
});

describe("syscall metrics on the real kernel", () => {
  test("a process making a known number of calls is counted exactly", async () => {
    const mine = (name: string) => (a: Record<string, unknown>) => a["process.pid"] === pid && a["syscall.name"] === name;
    await until(() => t.collected.total("process.syscall.count", mine("kill")) >= FAILING_KILLS, "kill count for the child");
    expect(t.collected.total("process.syscall.count", mine("getppid"))).toBe(GETPPID_CALLS);
    expect(t.collected.total("process.syscall.errors", mine("getppid"))).toBe(0);
    expect(t.collected.total("process.syscall.count", mine("kill"))).toBe(FAILING_KILLS);
    expect(t.collected.total("process.syscall.errors", mine("kill"))).toBe(FAILING_KILLS);
    expect(t.collected.total("process.syscall.duration", mine("getppid"))).toBe(GETPPID_CALLS);
    const p = t.collected.points.find((x) => x.metric === "process.syscall.count" && x.attributes["process.pid"] === pid)!;
    expect(p.attributes["process.executable.name"]).toBe("calls");
  });

  test("each export is bounded: at most top_processes pids, the rest summed as other", () => {
    const byInterval = new Map<string, Set<unknown>>();
    for (const p of t.collected.points.filter((x) => x.metric === "process.syscall.count")) {
      expect(p.attributes["process.pid"] !== undefined || p.attributes["process.executable.name"] === "other").toBe(true);
      expect(typeof p.attributes["syscall.name"]).toBe("string");
      if (p.attributes["process.pid"] === undefined) continue;
      const set = byInterval.get(p.time) ?? new Set();
      set.add(p.attributes["process.pid"]);
      byInterval.set(p.time, set);
    }
    expect(byInterval.size).toBeGreaterThan(0);
    for (const pids of byInterval.values()) expect(pids.size).toBeLessThanOrEqual(50);
  });
});
