/** Fakes shared by the collector tests: a pipeline that records what it accepts, and bounded polling. */
import type { Signal } from "../../../src/export/config";
import type { FlushResult, TelemetryPipeline } from "../../../src/export/types";
import type { SignalItems } from "../../../src/export/model";
import { waitUntil } from "../wait";

/** A pipeline that keeps accepted items per signal. `capacity` bounds unconsumed items (a slow backend drains them with `drain`). */
export class RecordingPipeline implements TelemetryPipeline {
  readonly accepted: { [S in Signal]: SignalItems[S][] } = { traces: [], metrics: [], logs: [], profiles: [] };
  /** Items accepted and not yet drained (the queue). */
  queued = 0;
  submitCalls = 0;
  flushCalls = 0;
  /** Items offered beyond the room (a pipeline without room() would drop them). */
  overOffered = 0;
  constructor(public capacity = Number.POSITIVE_INFINITY, public withRoom = true) {
    if (!withRoom) this.room = undefined;
  }
  room?: (signal: Signal) => number = () => Math.max(0, this.capacity - this.queued);
  submit(signal: Signal, items: readonly unknown[]): number {
    this.submitCalls++;
    const n = Math.min(items.length, Math.max(0, this.capacity - this.queued));
    this.overOffered += items.length - n;
    for (let i = 0; i < n; i++) (this.accepted[signal] as unknown[]).push(items[i]);
    this.queued += n;
    if (this.capacity === Number.POSITIVE_INFINITY) this.queued = 0;
    return n;
  }
  /** The slow backend takes `n` items out of the queue. */
  drain(n: number): void {
    this.queued = Math.max(0, this.queued - n);
  }
  readonly flushSources = new Set<() => void>();
  addFlushSource(pull: () => void): () => void {
    const entry = () => pull();
    this.flushSources.add(entry);
    return () => void this.flushSources.delete(entry);
  }
  async flush(): Promise<FlushResult> {
    this.flushCalls++;
    for (const pull of this.flushSources) pull();
    const none = { traces: 0, metrics: 0, logs: 0, profiles: 0 };
    return { exported: none, dropped: none, remaining: none };
  }
  setResourceAttributes(): void {}
}

/** Polls `cond` every 5 ms until it holds or `timeoutMs` passes (then throws with `what`). */
export async function waitFor(what: string, cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  await waitUntil(cond, { what, timeoutMs, intervalMs: 5 });
}

import type { AgentContext } from "../../../src/collectors/context";
import type { ComponentHost, ComponentState } from "../../../src/lifecycle/component";
import { parseConfig } from "../../../src/config/load";
import { Logger } from "../../../src/log/logger";
import { StatusAggregator } from "../../../src/status/aggregator";
import { AgentMetrics } from "../../../src/telemetry/metrics";
import { TaskRegistry } from "../../../src/telemetry/tasks";
import type { Attributes } from "../../../src/export/types";
import { EbpfCore, NATIVE_DEPS } from "../../../src/ebpf";

/** An AgentContext over a YAML configuration, a recording pipeline, a fixed workload directory and the native eBPF core. */
export function fakeContext(yaml: string, pipeline = new RecordingPipeline(), byPid: Record<number, Attributes> = {}): AgentContext & { pipeline: RecordingPipeline } {
  const tasks = new TaskRegistry();
  let ebpf: EbpfCore | undefined;
  return {
    config: parseConfig(yaml, {}),
    logger: new Logger({ sink: () => {} }),
    status: new StatusAggregator(),
    metrics: new AgentMetrics("svc", tasks),
    tasks,
    env: {},
    pipeline,
    workloads: { forContainer: () => undefined, forPid: (pid) => byPid[pid] },
    /** The native eBPF core, built on first use (as the agent builds one per context). */
    get ebpf() {
      return (ebpf ??= new EbpfCore(this, NATIVE_DEPS));
    },
  };
}

/** A component host that records every reported state. */
export function recordingHost(): ComponentHost & { states: Array<{ state: ComponentState; reason?: string }>; last(): { state: ComponentState; reason?: string } } {
  const states: Array<{ state: ComponentState; reason?: string }> = [];
  return {
    logger: new Logger({ sink: () => {} }),
    report: (state, reason) => void states.push({ state, reason }),
    states,
    last: () => states.at(-1)!,
  };
}
