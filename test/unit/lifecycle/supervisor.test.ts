import { describe, expect, test } from "bun:test";
import { parseConfig } from "../../../src/config/load";
import type { Component, ComponentHost } from "../../../src/lifecycle/component";
import { Mutex } from "../../../src/lifecycle/mutex";
import { ReloadApplyError, Supervisor } from "../../../src/lifecycle/supervisor";
import { Logger } from "../../../src/log/logger";
import { StatusAggregator } from "../../../src/status/aggregator";
import { nextTurn } from "../../helpers/fake-timers";

const quiet = () => new Logger({ sink: () => {} });

function fake(id: string, events: string[], opts: { failStart?: boolean; failReload?: boolean; readiness?: Component["readiness"] } = {}) {
  let host: ComponentHost | undefined;
  const c: Component & { host(): ComponentHost } = {
    id,
    readiness: opts.readiness,
    async start(h) {
      host = h;
      events.push(`start ${id}`);
      if (opts.failStart) throw new Error("no");
      h.report("ok");
    },
    async shutdown() {
      events.push(`shutdown ${id}`);
    },
    async reload(next) {
      events.push(`reload ${id} ${next.service_name}`);
      if (opts.failReload && next.service_name === "bad") throw new Error("cannot apply");
    },
    host: () => host!,
  };
  return c;
}

describe("supervisor", () => {
  test("a component that starts early (the HTTP interface) starts first and answers while the others start; shutdown keeps the order added", async () => {
    const events: string[] = [];
    const status = new StatusAggregator();
    const s = new Supervisor(quiet(), status);
    let readyDuringStart: unknown;
    const slow = fake("ebpf/network", events, { readiness: "ebpf" });
    const start = slow.start.bind(slow);
    slow.start = async (h) => {
      readyDuringStart = status.readiness();
      await start(h);
    };
    s.add(fake("exporter/otlp", events));
    s.add(slow);
    s.add({ ...fake("server/http", events), startsEarly: true });
    await s.startAll();
    expect(events).toEqual(["start server/http", "start exporter/otlp", "start ebpf/network"]);
    expect(readyDuringStart).toEqual({ ready: false, checks: { ebpf: "failed: ebpf/network is starting", otlp: "ok", discovery: "ok", memory: "ok" } });
    await s.shutdownAll(1000);
    expect(events.slice(3)).toEqual(["shutdown server/http", "shutdown ebpf/network", "shutdown exporter/otlp"]);
  });

  test("a reload taken while the start runs (the HTTP interface answers early) waits for every component to have started", async () => {
    const events: string[] = [];
    const s = new Supervisor(quiet(), new StatusAggregator());
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const slow = fake("ebpf/network", events);
    const start = slow.start.bind(slow);
    slow.start = async (h) => {
      await gate;
      await start(h);
    };
    s.add({ ...fake("server/http", events), startsEarly: true });
    s.add(fake("exporter/otlp", events));
    s.add(slow);
    const started = s.startAll();
    await nextTurn();
    const next = parseConfig("service_name: next\n", {});
    const reloaded = s.reloadLock.run(() => s.applyReload(next, next));
    await nextTurn();
    expect(events).toEqual(["start server/http", "start exporter/otlp"]);
    release();
    await Promise.all([started, reloaded]);
    expect(events).toEqual(["start server/http", "start exporter/otlp", "start ebpf/network", "reload server/http next", "reload exporter/otlp next", "reload ebpf/network next"]);
  });

  test("starts in order, shuts down in reverse, only what started", async () => {
    const events: string[] = [];
    const s = new Supervisor(quiet(), new StatusAggregator());
    s.add(fake("exporter/otlp", events));
    s.add(fake("ebpf/process", events));
    s.add(fake("server/http", events));
    await s.startAll();
    await s.shutdownAll(1000);
    await s.shutdownAll(1000);
    expect(events).toEqual(["start exporter/otlp", "start ebpf/process", "start server/http", "shutdown server/http", "shutdown ebpf/process", "shutdown exporter/otlp"]);
    expect(s.status.component("server/http")!.state).toBe("stopped");
  });

  test("a component that fails to start is a permanent error and the others still start", async () => {
    const events: string[] = [];
    const status = new StatusAggregator();
    const s = new Supervisor(quiet(), status);
    s.add(fake("ebpf/a", events, { failStart: true, readiness: "ebpf" }));
    s.add(fake("ebpf/b", events, { readiness: "ebpf" }));
    await s.startAll();
    expect(status.component("ebpf/a")).toMatchObject({ state: "permanent_error", reason: "start failed: no" });
    expect(status.component("ebpf/b")!.state).toBe("ok");
    expect(status.readiness()).toEqual({ ready: false, checks: { ebpf: "failed: start failed: no", otlp: "ok", discovery: "ok", memory: "ok" } });
  });

  test("a reload that one component refuses is rolled back on those that applied it", async () => {
    const events: string[] = [];
    const s = new Supervisor(quiet(), new StatusAggregator());
    s.add(fake("a/1", events));
    s.add(fake("b/2", events, { failReload: true }));
    s.add(fake("c/3", events));
    await s.startAll();
    events.length = 0;
    const good = parseConfig("service_name: good\n", {});
    const bad = parseConfig("service_name: bad\n", {});
    await expect(s.applyReload(bad, good)).rejects.toBeInstanceOf(ReloadApplyError);
    expect(events).toEqual(["reload a/1 bad", "reload b/2 bad", "reload a/1 good"]);
  });

  test("duplicate ids are refused", () => {
    const s = new Supervisor(quiet(), new StatusAggregator());
    s.add(fake("x/y", []));
    expect(() => s.add(fake("x/y", []))).toThrow(/duplicate/);
  });
});

describe("status aggregator", () => {
  test("readiness follows state changes both ways; disabled counts as ok", () => {
    const a = new StatusAggregator();
    a.report("exporter/otlp", "otlp", "starting");
    a.report("discovery/docker", "discovery", "disabled");
    expect(a.readiness().checks.otlp).toBe("failed: exporter/otlp is starting");
    a.report("exporter/otlp", "otlp", "recoverable_error", "connection refused");
    expect(a.readiness()).toEqual({ ready: false, checks: { ebpf: "ok", otlp: "failed: connection refused", discovery: "ok", memory: "ok" } });
    a.report("exporter/otlp", "otlp", "ok");
    expect(a.readiness().ready).toBe(true);
  });

  test("only a fatal error makes the agent unhealthy", () => {
    const a = new StatusAggregator();
    a.report("x/a", undefined, "permanent_error", "p");
    a.report("x/b", "otlp", "recoverable_error", "r");
    expect(a.health()).toEqual({ healthy: true, reasons: [] });
    a.report("x/c", undefined, "fatal_error", "disk gone");
    expect(a.health()).toEqual({ healthy: false, reasons: ["x/c: disk gone"] });
  });

  test("views are published and withdrawn", () => {
    const a = new StatusAggregator();
    const p = () => ({ n: 1 });
    a.provide("ebpf", p);
    expect(a.view<{ n: number }>("ebpf")).toEqual({ n: 1 });
    a.withdraw("ebpf", () => ({}));
    expect(a.view("ebpf")).toBeDefined();
    a.withdraw("ebpf", p);
    expect(a.view("ebpf")).toBeUndefined();
  });
});

describe("mutex", () => {
  test("runs callers one at a time in arrival order and records waits", async () => {
    const m = new Mutex("reload");
    const order: string[] = [];
    let release!: () => void;
    const first = m.run(async () => {
      order.push("1 in");
      await new Promise<void>((r) => (release = r));
      order.push("1 out");
    });
    const second = m.run(async () => {
      order.push("2 in");
    });
    await Promise.resolve();
    expect(m.held).toBe(true);
    release();
    await Promise.all([first, second]);
    expect(order).toEqual(["1 in", "1 out", "2 in"]);
    expect(m.contentions).toBe(1);
  });
});
