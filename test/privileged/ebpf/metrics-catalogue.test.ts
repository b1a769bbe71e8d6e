/**
 * Privileged e2e: dist/svc-agent with the process, network and syscalls program sets. Its live /metrics, parsed by
 * python3-prometheus-client and checked by promtool, has a sample for every series of the spec's catalogue from
 * the start, the known label values at 0 before any event; and once the sets are attached, /status and
 * /status/ebpf list the maps /metrics lists, without waiting for the periodic map sweep.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { QUIET_CONFIG, spawnAgent, type AgentProcess } from "../../helpers";
import type { EbpfView } from "../../../src/ebpf/status";
import { DROP_REASONS, EXPORT_ERROR_CODES, EXPORT_SIGNALS } from "../../../src/telemetry/metrics";
import { MAP_SWEEP_INTERVAL_MS } from "../../../src/ebpf/core";
import { closedLoopbackPort } from "../../helpers/ports";
import { SPEC_CATALOGUE } from "../../helpers/metric-catalogue";

const CATALOGUE = SPEC_CATALOGUE;
const SETS = ["process", "network", "syscalls"];

// Every sample of a text exposition as [name, labels, value], parsed by prometheus_client (not the agent's code).
const PARSE_PY = `
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        out.append([s.name, s.labels, s.value])
print(json.dumps(out))
`;

type Sample = [string, Record<string, string>, number];

function parse(text: string): Sample[] {
  const p = Bun.spawnSync(["/usr/bin/python3", "-c", PARSE_PY], { stdin: new TextEncoder().encode(text) });
  if (p.exitCode !== 0) throw new Error(`prometheus_client could not parse the scrape: ${p.stderr.toString()}`);
  return JSON.parse(p.stdout.toString()) as Sample[];
}

async function scrape(agent: AgentProcess): Promise<string> {
  const r = await fetch(`${agent.url}/metrics`);
  expect(r.status).toBe(200);
  return r.text();
}

let agent: AgentProcess;
let first = "";

beforeAll(async () => {
  const config = QUIET_CONFIG.replace("  ebpf:\n    enabled: false\n", "  ebpf:\n    enabled: true\n    network:\n      enabled: true\n    syscalls:\n      enabled: true\n");
  agent = await spawnAgent({ config, env: { OTLP_ENDPOINT: `127.0.0.1:${closedLoopbackPort()}` } });
  // The first scrape, as early as the interface answers: before any export, drop, or ring buffer event.
  first = await scrape(agent);
});

afterAll(async () => {
  expect(await agent?.stop()).toBe(0);
});

describe("the metric catalogue on the live binary", () => {
  test("promtool accepts the first scrape", () => {
    const p = Bun.spawnSync(["promtool", "check", "metrics"], { stdin: new TextEncoder().encode(first) });
    expect(p.stderr.toString()).toBe("");
    expect(p.exitCode).toBe(0);
  });

  test("the first scrape has a sample for every catalogue series but ebpf_map_entries, known label values at 0", () => {
    const samples = parse(first);
    const has = (name: string, labels: Record<string, string> = {}) =>
      samples.some(([n, l]) => n === name && Object.entries(labels).every(([k, v]) => l[k] === v));
    const value = (name: string, labels: Record<string, string>) => samples.find(([n, l]) => n === name && Object.entries(labels).every(([k, v]) => l[k] === v))?.[2];
    // ebpf_map_entries is per map: its label values exist once a set is loaded (checked below).
    for (const suffix of CATALOGUE.filter((c) => c !== "ebpf_map_entries")) {
      const name = suffix === "export_latency_seconds" || suffix === "export_batch_size" ? `svc_${suffix}_count` : `svc_${suffix}`;
      expect({ series: suffix, present: has(name) }).toEqual({ series: suffix, present: true });
    }
    for (const plural of ["spans", "metrics", "logs", "profiles"])
      for (const reason of DROP_REASONS) expect({ plural, reason, value: value(`svc_${plural}_dropped_total`, { reason }) }).toEqual({ plural, reason, value: 0 });
    for (const reason of ["rate_limit", "http_unparsed", "http_unanswered", "http2_state_lost"]) expect({ reason, value: value("svc_spans_dropped_total", { reason }) }).toEqual({ reason, value: 0 });
    for (const signal of EXPORT_SIGNALS) {
      for (const code of EXPORT_ERROR_CODES) expect(has("svc_export_errors_total", { signal, code })).toBe(true);
      expect(has("svc_export_latency_seconds_count", { signal })).toBe(true);
      expect(has("svc_export_batch_size_count", { signal })).toBe(true);
    }
    for (const set of SETS) {
      const ring = set === "process" ? "process/events" : set === "network" ? "network/conn_events" : undefined;
      if (ring) {
        expect(has("svc_ebpf_ringbuf_events_total", { ringbuf: ring })).toBe(true);
        expect(has("svc_ebpf_ringbuf_lost_total", { ringbuf: ring })).toBe(true);
      }
    }
    expect(value("svc_ebpf_perf_events_total", { buffer: "process/events_perf" })).toBe(0);
    expect(value("svc_ebpf_perf_lost_total", { buffer: "process/events_perf" })).toBe(0);
  });

  test("once the sets are attached, /status and /status/ebpf list the maps /metrics lists, before the periodic sweep", async () => {
    for (const set of SETS) await agent.waitFor((r) => r.msg === "eBPF program set attached" && r.set === set, 30_000);
    const attachedAt = performance.now();
    const state = async () => {
      const samples = parse(await scrape(agent));
      const metricMaps = samples.filter(([n]) => n === "svc_ebpf_map_entries").map(([, l]) => l.map!).sort();
      const view = (await (await fetch(`${agent.url}/status/ebpf`)).json()) as EbpfView;
      const status = (await (await fetch(`${agent.url}/status`)).json()) as { ebpf: { maps_created: number } };
      return { metricMaps, viewMaps: view.maps.map((m) => m.name).sort(), mapsCreated: status.ebpf.maps_created };
    };
    let s = await state();
    // Every set's maps, in all three places; polled for at most half the sweep interval (the stale answer lasted a whole one).
    while (!SETS.every((set) => s.viewMaps.some((m) => m.startsWith(`${set}/`))) && performance.now() - attachedAt < MAP_SWEEP_INTERVAL_MS / 2) {
      await Bun.sleep(50);
      s = await state();
    }
    for (const set of SETS) expect(s.viewMaps.some((m) => m.startsWith(`${set}/`))).toBe(true);
    expect(s.metricMaps).toEqual(s.viewMaps);
    expect(s.mapsCreated).toBe(s.viewMaps.length);
    // The metric set and the view stay equal on a later read too.
    const again = await state();
    expect(again.metricMaps).toEqual(again.viewMaps);
    expect(again.mapsCreated).toBe(again.viewMaps.length);
  });
});
