/**
 * Privileged: the `syscalls` maps stay bounded under process churn. A C program forks 10,000 short-lived
 * children; each makes CALLS_PER_CHILD calls of each of nine cheap syscalls (nine map entries per child,
 * far more than syscall_stats holds at once), every tenth one with a second thread blocked in pause() when the
 * process exits. Afterwards no map holds an entry of any child (exit_group and the killed thread never reach
 * sys_exit), no call was dropped, and the calls of a syscall nothing else on the machine makes (tuxcall, x86_64
 * number 184, not implemented: every call fails with ENOSYS) are exported exactly once.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import type { SyscallCollector } from "../../../../src/collectors/syscalls/component";
import type { LazyComponent } from "../../../../src/lifecycle/lazy";
import { compileC, startTracingAgent, until, type TracingAgent } from "../network/harness";

setDefaultTimeout(180_000);

const CHILDREN = 10_000;
const CALLS_PER_CHILD = 3;
/** tuxcall: x86_64 number 184, unimplemented; nothing else calls it, so its count is exact. */
const TUXCALL_NR = 184;
const PROGRAM = `
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
static void *blocked(void *arg) { (void)arg; pause(); return 0; }
int main(void) {
  for (int i = 0; i < ${CHILDREN}; i++) {
    pid_t p = fork();
    if (p < 0) return 1;
    if (p == 0) {
      if (i % 10 == 0) { pthread_t t; pthread_create(&t, 0, blocked, 0); }
      for (int k = 0; k < ${CALLS_PER_CHILD}; k++) {
        syscall(SYS_getppid); syscall(SYS_getuid); syscall(SYS_getgid); syscall(SYS_geteuid);
        syscall(SYS_getegid); syscall(SYS_getpgrp); syscall(SYS_sched_get_priority_max, SCHED_BATCH);
        syscall(SYS_sched_get_priority_min, SCHED_BATCH); syscall(${TUXCALL_NR});
      }
      syscall(SYS_exit_group, 0);
    }
    printf("%d\\n", p);
    if (waitpid(p, 0, 0) != p) return 2;
  }
  return 0;
}
`;

let t: TracingAgent;
let collector: SyscallCollector;
const children = new Set<number>();

beforeAll(async () => {
  const churn = compileC("churn", PROGRAM, ["-pthread"]);
  t = await startTracingAgent(`    network:
      enabled: false
    syscalls:
      enabled: true
      interval: 1s
      top_processes: 20`);
  await until(() => t.agent.agent.status.component("ebpf/syscalls")?.state === "ok", "ebpf/syscalls ok", 60_000);
  collector = (t.agent.agent.supervisor.components.find((c) => c.id === "ebpf/syscalls") as LazyComponent).loaded as SyscallCollector;
  const p = Bun.spawn([churn], { stdout: "pipe", stderr: "inherit" });
  const out = await new Response(p.stdout).text();
  expect(await p.exited).toBe(0);
  for (const line of out.split("\n")) if (line) children.add(Number(line));
});

afterAll(async () => {
  await t?.stop();
});

describe("syscall statistics under process churn", () => {
  test("the maps drain: no entry of any of the 10,000 ended processes is left", async () => {
    expect(children.size).toBe(CHILDREN);
    const left = () => {
      const e = collector.kernelEntries();
      return [...e.stats, ...e.inflight, ...e.processes].filter((tgid) => children.has(tgid)).length;
    };
    await until(() => left() === 0, "the children's entries to leave the maps", 60_000);
    const e = collector.kernelEntries();
    expect(e.stats.filter((x) => children.has(x))).toEqual([]);
    expect(e.inflight.filter((x) => children.has(x))).toEqual([]);
    expect(e.processes.filter((x) => children.has(x))).toEqual([]);
  });

  test("no call was dropped and the children's calls are exported exactly once", async () => {
    const rare = (a: Record<string, unknown>) => a["syscall.name"] === "tuxcall";
    const expected = CHILDREN * CALLS_PER_CHILD;
    await until(() => t.collected.total("process.syscall.count", rare) >= expected, "the children's calls to be exported", 60_000);
    // One more interval: nothing is counted twice.
    const exports = collector.counters.exports;
    await until(() => collector.counters.exports >= exports + 2, "two more exports", 30_000);
    expect(t.collected.total("process.syscall.count", rare)).toBe(expected);
    expect(t.collected.total("process.syscall.duration", rare)).toBe(expected);
    expect(t.collected.total("process.syscall.errors", rare)).toBe(expected);
    expect(collector.counters.dropped).toEqual({ stats_full: 0, inflight_full: 0 });
    const text = await t.agent.agent.metrics.render();
    expect(text).toContain('svc_ebpf_syscalls_dropped_total{reason="stats_full"} 0\n');
  });
});
