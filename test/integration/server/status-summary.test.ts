/**
 * GET /status reads the summaries the subsystems publish next to their views; its figures must be those of the
 * full views (/status/ebpf, /status/export, /status/discovery) at the same instant. A view replaced without a
 * summary (here a test's view) is summarised from the view itself, and withdrawing it brings back the defaults.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { TSchema } from "@sinclair/typebox";
import { createServer } from "../../../src/server/app";
import { StatusSchema } from "../../../src/server/model";
import { sameLeaves, STATUS_CONSTANT_FIELDS, STATUS_FIELDS, statusBody } from "../../../src/server/routes/status";
import { EBPF_STATUS, type EbpfView } from "../../../src/ebpf/status";
import { EXPORT_STATUS } from "../../../src/export/status";
import { spans } from "../export/harness";
import { QUIET_CONFIG } from "../../helpers/agent-process";
import { inProcessAgent, type InProcessAgent } from "../../helpers/in-process";
import { json, waitUntil } from "../../helpers/wait";

let a: InProcessAgent;
beforeAll(async () => {
  a = await inProcessAgent(QUIET_CONFIG);
});
afterAll(async () => {
  await a?.stop();
});

async function get(path: string) {
  const r = await a.request(path);
  expect(r.status).toBe(200);
  return json(r);
}

test("/status figures equal the full views' figures", async () => {
  a.agent.ctx.pipeline.submit("traces", spans(7));
  await waitUntil(() => a.agent.ctx.pipeline.accounting!().traces.exported === 7, { what: "7 spans exported" });
  const [status, ebpf, exp, disc] = [await get("/status"), await get("/status/ebpf"), await get("/status/export"), await get("/status/discovery")];
  expect(a.agent.status.summary(EXPORT_STATUS.name)).toBeDefined();
  expect(status.export).toEqual({
    endpoint: exp.endpoint,
    connected: exp.connected,
    last_export: exp.last_export,
    spans_exported: exp.queues.traces.exported,
    metrics_exported: exp.queues.metrics.exported,
  });
  expect(status.export.spans_exported).toBe(7);
  expect(status.ebpf).toEqual({
    enabled: ebpf.enabled,
    programs_loaded: ebpf.programs.filter((p: { id: number }) => p.id > 0).length,
    maps_created: ebpf.maps.length,
    ringbuf_size: ebpf.ringbuf.size,
  });
  expect(status.discovery).toEqual({
    kubernetes: disc.kubernetes.enabled && disc.kubernetes.connected,
    docker: disc.docker.enabled && disc.docker.connected,
    pods_discovered: disc.kubernetes.pods_watched,
    containers_discovered: disc.docker.containers,
  });
});

test("a view replaced without a summary is summarised from the view; withdrawn, the defaults come back", async () => {
  const fake: EbpfView = {
    enabled: true,
    programs: [
      { name: "a", type: "kprobe", attached: true, id: 11 },
      { name: "b", type: "kprobe", attached: false, id: 0, reason: "not loaded" },
      { name: "c", type: "tracepoint", attached: true, id: 12 },
    ],
    maps: [
      { name: "m1", type: "hash", entries: 1, max_entries: 8 },
      { name: "m2", type: "ringbuf", entries: 0, max_entries: 0 },
    ],
    ringbuf: { size: 4096, events_received: 3, events_lost: 0 },
  };
  a.agent.status.provide(EBPF_STATUS.name, () => fake);
  try {
    expect(a.agent.status.summary(EBPF_STATUS.name)).toBeUndefined();
    expect((await get("/status")).ebpf).toEqual({ enabled: true, programs_loaded: 2, maps_created: 2, ringbuf_size: 4096 });
  } finally {
    a.agent.status.withdraw(EBPF_STATUS.name);
  }
  // No publisher left: the disabled defaults, never invented figures.
  expect((await get("/status")).ebpf).toMatchObject({ enabled: false, programs_loaded: 0, maps_created: 0 });
});

test("every field of the /status schema is compared at each request or constant (reused text depends on it)", async () => {
  expect(Object.keys((StatusSchema as unknown as { properties: Record<string, TSchema> }).properties)).toEqual(STATUS_FIELDS);
  expect(Object.keys(await get("/status"))).toEqual(STATUS_FIELDS);
  // The constant fields are the build's and the host's.
  const body = statusBody(a.deps);
  expect(STATUS_CONSTANT_FIELDS.map((k) => body[k])).toEqual([a.deps.build.version, a.deps.build.commit, a.deps.build.built, body.host]);
});

test("sameLeaves compares every leaf, nested objects and arrays included", () => {
  expect(sameLeaves({ a: 1, b: { c: "x", d: null } }, { a: 1, b: { c: "x", d: null } })).toBe(true);
  expect(sameLeaves({ a: 1, b: { c: "x" } }, { a: 1, b: { c: "y" } })).toBe(false);
  expect(sameLeaves({ a: 1 }, { a: 1, b: undefined })).toBe(false);
  expect(sameLeaves({ a: [1, 2] }, { a: [1, 2, 3] })).toBe(false);
  expect(sameLeaves({ a: [1, { b: 2 }] }, { a: [1, { b: 2 }] })).toBe(true);
  expect(sameLeaves({ a: null }, { a: {} })).toBe(false);
  expect(sameLeaves({ a: 0 }, { a: "0" })).toBe(false);
});

test("/status text is reused only while every figure is unchanged, in the listener's mode too", async () => {
  for (const app of [undefined, createServer(a.deps, { checkAnswers: false })]) {
    const request = (p: string) => (app ? app.handle(new Request(`http://localhost${p}`)) : a.request(p));
    const before = await (await request("/status")).text();
    expect(await (await request("/status")).text()).toBe(before);
    const exported = a.agent.ctx.pipeline.accounting!().traces.exported;
    a.agent.ctx.pipeline.submit("traces", spans(3));
    await waitUntil(() => a.agent.ctx.pipeline.accounting!().traces.exported === exported + 3, { what: "3 more spans exported" });
    const after = await (await request("/status")).text();
    expect(JSON.parse(after).export.spans_exported).toBe(JSON.parse(before).export.spans_exported + 3);
    expect(after).toBe(JSON.stringify(statusBody(a.deps)));
  }
});
