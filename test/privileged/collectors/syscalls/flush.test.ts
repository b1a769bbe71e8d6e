/**
 * Privileged: POST /admin/flush hands the syscall statistics counted since the last interval to the export
 * pipeline (interval 1h here, so nothing else would export them): a process making exactly N getppid calls is
 * at the backend with N when the flush answers.
 */
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTracingAgent, until, type TracingAgent } from "../network/harness";

setDefaultTimeout(40_000);

const GETPPID_CALLS = 4321;
const PROGRAM = `
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
  for (int i = 0; i < ${GETPPID_CALLS}; i++) syscall(SYS_getppid);
  return 0;
}
`;

let t: TracingAgent;
let binary = "";

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), "svc-syscalls-flush-"));
  writeFileSync(join(dir, "calls.c"), PROGRAM);
  binary = join(dir, "calls");
  const cc = Bun.spawnSync(["gcc", "-O1", "-o", binary, join(dir, "calls.c")]);
  if (cc.exitCode !== 0) throw new Error(`gcc failed: ${cc.stderr.toString()}`);
  t = await startTracingAgent(`    network:
      enabled: false
    syscalls:
      enabled: true
      interval: 1h
      top_processes: 50`);
  await until(() => t.agent.agent.status.component("ebpf/syscalls")?.state === "ok", "ebpf/syscalls ok", 30_000);
});

afterAll(async () => {
  await t?.stop();
});

test("a flush exports the interval's syscall counts at once", async () => {
  const p = Bun.spawn([binary], { stdout: "ignore", stderr: "inherit" });
  expect(await p.exited).toBe(0);
  const mine = (a: Record<string, unknown>) => a["process.pid"] === p.pid && a["syscall.name"] === "getppid";
  expect(t.collected.total("process.syscall.count", mine)).toBe(0);
  const r = await t.agent.request("/admin/flush", { method: "POST" });
  expect(r.status).toBe(200);
  const body = (await r.json()) as { status: string; flushed: { metrics: number } };
  expect(body.status).toBe("ok");
  expect(body.flushed.metrics).toBeGreaterThan(0);
  expect(t.collected.total("process.syscall.count", mine)).toBe(GETPPID_CALLS);
});
