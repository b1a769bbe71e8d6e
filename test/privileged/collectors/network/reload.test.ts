/**
 * Privileged: reloading agent.ebpf.network settings that the kernel side is built with reloads the set:
 * http_capture socket -> syscalls swaps the attached programs; network.enabled false detaches everything.
 * A reload while a CPU profile samples the agent (GET /debug/pprof/profile) still loads the set: the sampling
 * thread signals the agent's thread every millisecond, which made the verifier give up with EAGAIN.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { sampleCpu } from "../../../../src/debug/cpu-profile";
import { startTracingAgent, until, type TracingAgent } from "./harness";

setDefaultTimeout(60_000);

let t: TracingAgent;

async function programs(): Promise<Map<string, boolean>> {
  const r = await t.agent.request("/status/ebpf");
  const body = (await r.json()) as { programs: Array<{ name: string; attached: boolean }> };
  return new Map(body.programs.map((p) => [p.name, p.attached]));
}

beforeAll(async () => {
  t = await startTracingAgent(`    network:
      enabled: true
      http_capture: socket`);
  await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
});

afterAll(async () => {
  await t?.stop();
});

describe("ebpf/network reload", () => {
  test("socket -> syscalls capture: the syscall tracepoints get attached; then disabled: nothing of the set stays", async () => {
    const before = await programs();
    expect(before.get("on_send_length")).toBe(true);
    expect(before.has("exit_read")).toBe(false);
    await t.reconfigure(`    network:
      enabled: true
      http_capture: syscalls
      max_spans_per_second: 10`);
    await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok after reload", 30_000);
    const after = await programs();
    expect(after.get("exit_read")).toBe(true);
    // Syscall capture finds connections by socket address: the classic family on the `conns` hash.
    expect(after.get("on_set_state_tp")).toBe(true);
    expect(after.has("on_set_state")).toBe(false);
    await t.reconfigure(`    network:
      enabled: false`);
    await until(() => t.agent.agent.status.component("ebpf/network")?.state === "disabled", "ebpf/network disabled", 30_000);
    const off = await programs();
    expect(off.has("on_set_state")).toBe(false);
    expect(off.has("on_set_state_tp")).toBe(false);
  });

  test("the set loads while a CPU profile samples the agent, and the profile completes", async () => {
    await t.reconfigure(`    network:
      enabled: false`);
    await until(() => t.agent.agent.status.component("ebpf/network")?.state === "disabled", "ebpf/network disabled", 30_000);
    const profile = sampleCpu(3);
    await Bun.sleep(200);
    await t.reconfigure(`    network:
      enabled: true
      http_capture: socket`);
    const state = () => t.agent.agent.status.component("ebpf/network");
    await until(() => state()?.state !== "disabled" && state()?.state !== "starting", "ebpf/network to leave disabled", 30_000);
    expect(state()?.state, state()?.reason).toBe("ok");
    expect((await programs()).get("on_send_length")).toBe(true);
    const p = await profile;
    expect(p.samples?.length ?? 0).toBeGreaterThan(0);
  });
});
