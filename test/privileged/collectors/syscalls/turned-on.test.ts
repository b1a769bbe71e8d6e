/**
 * Privileged: a program-set collector off at start is not loaded; a reload that turns it on loads its code, and
 * the component made under the running configuration attaches its programs under the next one (ebpf/syscalls:
 * status ok, its tracepoints attached in /status/ebpf); a reload turning it off again detaches them.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { LazyComponent } from "../../../../src/lifecycle/lazy";
import { inProcessAgent, type InProcessAgent } from "../../../helpers/in-process";
import { quietConfig } from "../../../helpers/quiet-config";
import { waitUntil } from "../../../helpers/wait";

const ebpf = (syscalls: boolean) => quietConfig({ ebpf: `    enabled: true\n    network:\n      enabled: false\n    syscalls:\n      enabled: ${syscalls}\n      interval: 1s` });
let t: InProcessAgent;

async function attached(): Promise<string[]> {
  const body = (await (await t.request("/status/ebpf")).json()) as { programs: Array<{ name: string; attached: boolean }> };
  return body.programs.filter((p) => p.attached && p.name.startsWith("sc_")).map((p) => p.name).sort();
}

beforeAll(async () => {
  t = await inProcessAgent(ebpf(false), { backend: false });
});

afterAll(async () => {
  await t?.stop();
});

describe("a program-set collector turned on by a reload", () => {
  const standIn = () => t.agent.supervisor.components.find((c) => c.id === "ebpf/syscalls") as LazyComponent;

  test("off at start: disabled, not loaded, no programs", async () => {
    expect(t.agent.status.component("ebpf/syscalls")?.state).toBe("disabled");
    expect(standIn().loaded).toBeUndefined();
    expect(await attached()).toEqual([]);
  });

  test("turned on: loaded, ok, its tracepoints attached", async () => {
    t.writeConfig(ebpf(true));
    expect(await t.agent.reload("test")).toEqual(expect.objectContaining({ ok: true }));
    expect(standIn().loaded?.id).toBe("ebpf/syscalls");
    await waitUntil(() => t.agent.status.component("ebpf/syscalls")?.state === "ok", { what: "ebpf/syscalls ok", timeoutMs: 60_000 });
    expect(await attached()).toEqual(["sc_enter", "sc_exec", "sc_exit", "sc_task_exit"]);
  });

  test("turned off again: disabled, programs detached", async () => {
    t.writeConfig(ebpf(false));
    expect(await t.agent.reload("test")).toEqual(expect.objectContaining({ ok: true }));
    await waitUntil(() => t.agent.status.component("ebpf/syscalls")?.state === "disabled", { what: "ebpf/syscalls disabled" });
    expect(await attached()).toEqual([]);
  });
});
