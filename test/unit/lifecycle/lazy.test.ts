import { describe, expect, test } from "bun:test";
import { parseConfig } from "../../../src/config/load";
import type { Config } from "../../../src/config/schema";
import type { Component } from "../../../src/lifecycle/component";
import { lazyComponents } from "../../../src/lifecycle/lazy";
import { COLLECTORS, partOf } from "../../../src/collectors/registry";
import { logsOf } from "../../../src/collectors/logs/config";
import { recordingHost } from "../../helpers/fakes/collectors";

const configWith = (logs: boolean): Config => parseConfig(`agent:\n  logs:\n    enabled: ${logs}\n`);

/** A group of two components made by a factory whose load is counted; `events` records what reaches them. */
function group(events: string[], ids = ["x/a", "x/b"]) {
  let loads = 0;
  const make = (id: string): Component => ({
    id,
    async start() {
      events.push(`start ${id}`);
    },
    async shutdown() {
      events.push(`shutdown ${id}`);
    },
    async reload(next) {
      events.push(`reload ${id} ${logsOf(next).enabled}`);
    },
  });
  return {
    loads: () => loads,
    group: {
      ids: ["x/a", "x/b"],
      enabled: (c: Config) => logsOf(c).enabled,
      load: async () => {
        loads++;
        return () => ids.map(make);
      },
    },
  };
}

describe("components loaded on first use", () => {
  test("off at start: never loaded, each id reports disabled; a shutdown touches nothing", async () => {
    const events: string[] = [];
    const g = group(events);
    const config = configWith(false);
    const parts = lazyComponents(g.group, () => config);
    expect(parts.map((p) => p.id)).toEqual(["x/a", "x/b"]);
    for (const p of parts) await p.prepare();
    const hosts = parts.map(() => recordingHost());
    for (const [i, p] of parts.entries()) await p.start(hosts[i]!);
    expect(hosts.map((h) => h.last().state)).toEqual(["disabled", "disabled"]);
    for (const p of parts) await p.shutdown(AbortSignal.timeout(1000));
    await parts[0]!.reload(configWith(false), config);
    expect(g.loads()).toBe(0);
    expect(events).toEqual([]);
    expect(parts[0]!.loaded).toBeUndefined();
  });

  test("on at start: loaded once for the whole group, made by prepare() before the start, each started with its stand-in's host", async () => {
    const events: string[] = [];
    const g = group(events);
    const config = configWith(true);
    const parts = lazyComponents(g.group, () => config);
    await parts[0]!.prepare();
    expect(parts.map((p) => p.loaded?.id)).toEqual(["x/a", undefined]);
    expect(events).toEqual([]);
    for (const p of parts) await p.start(recordingHost());
    expect(g.loads()).toBe(1);
    expect(parts.map((p) => p.loaded?.id)).toEqual(["x/a", "x/b"]);
    await parts[1]!.reload(configWith(false), config);
    for (const p of parts) await p.shutdown(AbortSignal.timeout(1000));
    expect(events).toEqual(["start x/a", "start x/b", "reload x/b false", "shutdown x/a", "shutdown x/b"]);
  });

  test("turned on by a reload: loaded then, started under the running configuration, then reloaded to the next", async () => {
    const events: string[] = [];
    const g = group(events);
    let running = configWith(false);
    const parts = lazyComponents(g.group, () => running);
    for (const p of parts) await p.start(recordingHost());
    const next = configWith(true);
    for (const p of parts) await p.reload(next, running);
    running = next;
    expect(g.loads()).toBe(1);
    expect(events).toEqual(["start x/a", "reload x/a true", "start x/b", "reload x/b true"]);
  });

  test("a factory that makes other ids than declared fails the start, naming both", async () => {
    const g = group([], ["x/a", "x/c"]);
    const config = configWith(true);
    const [a] = lazyComponents(g.group, () => config);
    await expect(a!.start(recordingHost())).rejects.toThrow("components x/a, x/c made where x/a, x/b were declared");
  });

  test("a factory whose components feed another readiness check than declared fails the start", async () => {
    const g = group([]);
    const config = configWith(true);
    const [a] = lazyComponents({ ...g.group, readiness: "ebpf" }, () => config);
    expect(a!.readiness).toBe("ebpf");
    await expect(a!.start(recordingHost())).rejects.toThrow("component x/a feeds readiness none where ebpf was declared");
  });

  test("every registered collector declares distinct ids and its readiness check; the parts say whether the defaults turn them on", () => {
    const ids = COLLECTORS.flatMap((c) => c.ids);
    expect(new Set(ids).size).toBe(ids.length);
    expect(COLLECTORS.filter((c) => c.readiness === "ebpf").flatMap((c) => c.ids)).toEqual(["ebpf/network", "ebpf/tls", "ebpf/syscalls"]);
    const defaults = parseConfig("{}");
    expect(COLLECTORS.filter((c) => partOf(c).enabled(defaults)).flatMap((c) => c.ids)).toEqual(["ebpf/network", "ebpf/tls"]);
  });
});
