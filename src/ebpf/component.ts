/**
 * Component `ebpf/<set>`: loads one program set through the generic loader in the background after start,
 * drains its ring buffers into the set's event handler, and reports `ok`, `disabled`, or `permanent_error`
 * with the reason (environment, libbpf, or a required program). Readiness check `ebpf`.
 */
import type { Config } from "../config/schema";
import type { Component, ComponentHost } from "../lifecycle/component";
import type { EbpfCore } from "./core";
import { loadProgramSet, type LoadedSet } from "./loader";
import { RecordPump } from "./pump";
import type { ProgramSetSpec, ProgramStatus } from "./spec";

/** How long a stopping set's pumps keep reading what their rings and backlogs hold, all pumps together. */
export const STOP_DRAIN_MS = 100;

/** A program set as the agent runs it: its spec, where its events go, and whether configuration turns it on. */
export interface ProgramSetDefinition<E> {
  spec: ProgramSetSpec<E>;
  /** Called for every decoded record, on the event loop. */
  onEvent(event: E): void;
  /** Called once the set is attached (e.g. to seed caches), with the set (its maps are readable until onDetached). */
  onAttached?(set: LoadedSet<E>): void;
  /** Called before the set is closed (stop, reload, shutdown); the set's maps must not be used afterwards. */
  onDetached?(): void;
  /** Whether the set runs under this configuration (agent.ebpf.enabled is checked first). */
  enabled?(config: Config): boolean;
}

export class EbpfSetComponent<E> implements Component {
  readonly id: string;
  readonly readiness = "ebpf" as const;
  readonly #core: EbpfCore;
  readonly #def: ProgramSetDefinition<E>;
  #host: ComponentHost | undefined;
  #loading: Promise<void> | undefined;
  #loaded: LoadedSet<E> | undefined;
  /** Loaded by prepare(), waiting for activate() to attach. */
  #prepared: LoadedSet<E> | undefined;
  /** A set prepare() did not load (disabled, failed): its record, made again by activate(). */
  #replay: (() => void) | undefined;
  /** .data globals changed since the spec was made (setVariables): set in every set loaded from now on too. */
  #variables: Record<string, number | bigint> | undefined;
  #pumps: Array<RecordPump<E>> = [];
  #generation = 0;

  constructor(core: EbpfCore, definition: ProgramSetDefinition<E>) {
    this.#core = core;
    this.#def = definition;
    this.id = `ebpf/${definition.spec.name}`;
    core.declareBuffers(definition.spec as ProgramSetSpec<unknown>);
  }

  #enabled(config: Config): boolean {
    return config.agent.ebpf.enabled && (this.#def.enabled?.(config) ?? true);
  }

  async start(host: ComponentHost): Promise<void> {
    this.#host = host;
    this.#begin(host);
  }

  #begin(host: ComponentHost, deferAttach = false): void {
    const name = this.#def.spec.name;
    if (!this.#enabled(this.#core.ctxConfig())) {
      const disabled = () => {
        this.#core.record(name, { programs: [], loaded: undefined, pumps: [] });
        host.report("disabled");
      };
      if (deferAttach) this.#replay = disabled;
      else disabled();
      return;
    }
    host.report("starting");
    const generation = ++this.#generation;
    this.#loading = this.#core.track(`ebpf/${name} load`, () => this.#load(host, generation, deferAttach));
  }

  async #load(host: ComponentHost, generation: number, deferAttach: boolean): Promise<void> {
    const spec = this.#def.spec;
    const prepared = await this.#core.prepare();
    if (generation !== this.#generation) return;
    if (!prepared.ok) {
      const programs = spec.programs.map((p) => ({ name: p.name, type: p.attach.kind, attached: false, id: 0, reason: prepared.reason }));
      this.#failed(host, programs, prepared.reason, deferAttach);
      return;
    }
    const outcome = await loadProgramSet(spec, {
      runtime: prepared.runtime,
      probes: prepared.probes,
      objectBytes: (n) => this.#core.objectBytes(n),
      ringbufSizeBytes: this.#core.ringbufSizeBytes(),
      useRingbuf: prepared.environment.ringbuf && !prepared.probes.ringbuf(),
      onVerifierLog: (program, log) => this.#core.verifierLog(spec.name, program, log),
      deferAttach,
    });
    if (generation !== this.#generation) {
      if (outcome.ok) outcome.set.close();
      return;
    }
    if (!outcome.ok) {
      this.#failed(host, outcome.programs, outcome.reason, deferAttach);
      return;
    }
    if (deferAttach) {
      this.#prepared = outcome.set;
      return;
    }
    this.#activate(host, outcome.set);
  }

  /**
   * Records and reports a set that could not run; from prepare() (`deferred`) only at activate(), once the set it
   * replaces stopped (whose record is still the one in use until then).
   */
  #failed(host: ComponentHost, programs: ProgramStatus[], reason: string, deferred: boolean): void {
    if (deferred) {
      this.#replay = () => this.#failed(host, programs, reason, false);
      return;
    }
    this.#core.record(this.#def.spec.name, { programs, loaded: undefined, pumps: [] });
    host.report("permanent_error", reason);
  }

  /** Attaches a loaded set (if it waited), starts its pumps and says it is ok. */
  #activate(host: ComponentHost, set: LoadedSet<E>): void {
    const spec = this.#def.spec;
    this.#applyVariables(set);
    const failed = set.attach();
    if (failed !== undefined) {
      this.#failed(host, set.programs, failed, false);
      return;
    }
    this.#loaded = set;
    this.#pumps = set.readers.map((b) => {
      const pump = new RecordPump<E>(b, (e) => this.#def.onEvent(e), (err) => host.logger.warn("ring buffer read failed", { map: b.map, error: err.message }));
      pump.onBatch = (n) => this.#core.countEvents(spec.name, b.map, b.kind, n);
      pump.spillAllowed = () => !this.#core.memoryRefusing;
      return pump;
    });
    this.#core.record(spec.name, { programs: set.programs, loaded: set as LoadedSet<unknown>, pumps: this.#pumps as Array<RecordPump<unknown>> });
    for (const p of this.#pumps) p.start(this.#core.ticker);
    this.#def.onAttached?.(set);
    const notAttached = set.programs.filter((p) => !p.attached);
    for (const p of notAttached) host.logger.warn("optional eBPF program not attached", { program: p.name, type: p.type, reason: p.reason });
    host.logger.info("eBPF program set attached", {
      set: spec.name,
      attached: set.programs.filter((p) => p.attached).map((p) => p.name),
      not_attached: notAttached.map((p) => p.name),
      transport: set.readers.map((r) => `${r.map}:${r.kind}`),
    });
    host.report("ok");
  }

  /**
   * Sets .data globals of the set (ProgramSetSpec.variables) while it runs: in the loaded set now, and in any loaded
   * later (one loading now, or loaded again by a reload) as it is activated: before its programs attach when it was
   * prepared, right after when start() loaded it (the loader attaches those).
   */
  setVariables(values: Record<string, number | bigint>): void {
    this.#variables = { ...this.#variables, ...values };
    this.#applyVariables(this.#loaded);
  }

  #applyVariables(set: LoadedSet<E> | undefined): void {
    if (!set || !this.#variables) return;
    try {
      set.object.setVariables?.(this.#variables);
    } catch (e) {
      this.#host?.logger.warn("setting globals of an eBPF program set failed", { set: this.#def.spec.name, error: (e as Error).message });
    }
  }

  /**
   * Starts as start() does, but loads the set without attaching it (the kernel verifies its programs meanwhile);
   * resolves once loaded (or failed, or disabled). activate() then attaches it: a set replacing another is made
   * ready while the other still runs.
   */
  async prepare(host: ComponentHost): Promise<void> {
    this.#host = host;
    this.#begin(host, true);
    await this.#loading;
  }

  /** Attaches what prepare() loaded and starts reading it (nothing when it did not load). */
  activate(): void {
    const set = this.#prepared;
    const replay = this.#replay;
    this.#prepared = undefined;
    this.#replay = undefined;
    if (set && this.#host) this.#activate(this.#host, set);
    else replay?.();
  }

  async #stop(): Promise<void> {
    this.#generation++;
    await this.#loading;
    this.#loading = undefined;
    this.#prepared?.close();
    this.#prepared = undefined;
    this.#replay = undefined;
    this.#retire();
  }

  /**
   * Detaches and closes the running set. What its rings and backlogs hold goes to the handlers first (a shutdown's
   * final flush, a reload's last counts); what is still there after STOP_DRAIN_MS counts as lost.
   */
  #retire(): void {
    const end = performance.now() + STOP_DRAIN_MS;
    for (const p of this.#pumps) {
      const left = p.drainBeforeClose(Math.max(0, end - performance.now()));
      if (left > 0) this.#core.countLost(this.#def.spec.name, p.binding.map, p.binding.kind, left);
      p.close();
    }
    this.#pumps = [];
    this.#core.remove(this.#def.spec.name);
    if (this.#loaded) this.#def.onDetached?.();
    this.#loaded?.close();
    this.#loaded = undefined;
  }

  /**
   * True when every record of ring `map` written until now was handed on: nothing pending in the ring and no backlog
   * held in memory (also when the set has no such ring, or is not loaded).
   */
  caughtUp(map: string): boolean {
    const pump = this.#pumps.find((p) => p.binding.map === map);
    if (!pump) return true;
    return pump.backlog === 0 && (pump.binding.reader.pendingBytes?.() ?? 0) === 0;
  }

  async shutdown(_deadline: AbortSignal): Promise<void> {
    await this.#stop();
  }

  async reload(next: Config, previous: Config): Promise<void> {
    this.#core.applyConfig(next);
    const a = previous.agent.ebpf;
    const b = next.agent.ebpf;
    const changed = this.#enabled(previous) !== this.#enabled(next) || a.ringbuf_size !== b.ringbuf_size;
    if (!changed || !this.#host) return;
    if (this.#loaded && this.#enabled(next)) {
      // New rings: the set is loaded again while the running one still reads the host (as reloadSet's replacement).
      await this.prepare(this.#host);
      this.#retire();
      this.activate();
      return;
    }
    await this.#stop();
    this.#begin(this.#host);
  }
}

/** How long a set being replaced on reload may take to stop. */
const REPLACE_STOP_MS = 5000;

/**
 * Reloads the set component `set` of a collector: when `rebuild` (a constant the kernel side is built with
 * changed) `make()` takes its place; otherwise it reloads. The replacement is loaded (the verifier's part, the
 * longest) while `set` still runs, and attached right after `set` stopped: what the host does in between is not
 * seen, a gap of the old set's last drain and close instead of the whole load. Returns the component in use
 * afterwards.
 */
export async function reloadSet<E>(set: EbpfSetComponent<E>, rebuild: boolean, make: () => EbpfSetComponent<E>, host: ComponentHost | undefined, next: Config, previous: Config): Promise<EbpfSetComponent<E>> {
  if (!rebuild) {
    await set.reload(next, previous);
    return set;
  }
  const replacement = make();
  if (!host) {
    await set.shutdown(AbortSignal.timeout(REPLACE_STOP_MS));
    return replacement;
  }
  await replacement.prepare(host);
  await set.shutdown(AbortSignal.timeout(REPLACE_STOP_MS));
  replacement.activate();
  return replacement;
}
