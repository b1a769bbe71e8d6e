/** Fakes of the ffi/types interfaces (no kernel) and a context for eBPF unit tests. */
import { LibbpfError, QuietLoadError } from "../../../ffi/errors";
import type { AttachTarget, BpfLinkApi, BpfMapApi, BpfObjectApi, BpfProgramApi, BpfRuntime, EntryCounter, RecordDecoderFn, RecordHandler, RecordReader } from "../../../ffi/types";
import type { BaseContext } from "../../../src/lifecycle/context";
import { parseConfig } from "../../../src/config/load";
import type { ConfigDocument } from "../../../src/config/document";
import type { EbpfDeps } from "../../../src/ebpf/core";
import type { EnvironmentProbe } from "../../../src/ebpf/environment";
import { Logger, type LogRecord } from "../../../src/log/logger";
import { StatusAggregator } from "../../../src/status/aggregator";
import { AgentMetrics } from "../../../src/telemetry/metrics";
import { TaskRegistry } from "../../../src/telemetry/tasks";

export interface ProgramTemplate {
  name: string;
  typeName?: string;
  /** Throw from load() while this program is set to autoload. */
  failLoad?: { errno: number; verifierLog?: string };
  /** Throw from attach(). */
  failAttach?: { op: string; errno: number };
}

export interface MapTemplate {
  name: string;
  typeName: string;
  maxEntries: number;
  entries?: number;
  lost?: bigint;
}

export class FakeReader implements RecordReader {
  readonly queue: Uint8Array[] = [];
  closed = false;
  lostReported = 0;
  constructor(readonly kind: "ringbuf" | "perfbuf") {}
  push(record: Uint8Array): void {
    this.queue.push(record);
  }
  consume(onRecord: RecordHandler, maxRecords = Number.MAX_SAFE_INTEGER): number {
    let n = 0;
    while (!this.closed && n < maxRecords && this.queue.length > 0) {
      const r = this.queue.shift()!;
      onRecord(new DataView(r.buffer, r.byteOffset, r.byteLength), 0, r.byteLength);
      n++;
    }
    return n;
  }
  consumeDecoded<E>(decode: RecordDecoderFn<E>, sink: (event: E) => void, maxRecords: number, onError: (error: unknown) => void): number {
    return this.consume((view, offset, length) => {
      try {
        sink(decode(view, offset, length));
      } catch (e) {
        onError(e);
      }
    }, maxRecords);
  }
  close(): void {
    this.closed = true;
  }
  [Symbol.dispose](): void {
    this.close();
  }
}

export class FakeLink implements BpfLinkApi {
  closed = false;
  constructor(readonly program: string, readonly target: AttachTarget) {}
  close(): void {
    this.closed = true;
  }
  [Symbol.dispose](): void {
    this.close();
  }
}

let nextProgramId = 100;

export class FakeProgram implements BpfProgramApi {
  autoload = true;
  loadedId = 0;
  readonly links: FakeLink[] = [];
  readonly sectionName: string;
  readonly typeName: string;
  constructor(readonly object: FakeObject, readonly template: ProgramTemplate) {
    this.sectionName = `fake/${template.name}`;
    this.typeName = template.typeName ?? "tracepoint";
  }
  get name(): string {
    return this.template.name;
  }
  setAutoload(on: boolean): void {
    if (this.object.loaded) throw new LibbpfError("bpf_program__set_autoload", 16, { subject: this.name });
    this.autoload = on;
  }
  id(): number {
    return this.loadedId;
  }
  attach(target: AttachTarget): BpfLinkApi {
    if (!this.loadedId) throw new LibbpfError("attach", 9, { subject: this.name, detail: "not loaded" });
    const f = this.template.failAttach;
    if (f) throw new LibbpfError(f.op, f.errno, { subject: this.name });
    const link = new FakeLink(this.name, target);
    this.links.push(link);
    return link;
  }
}

let nextKeptFd = 0;

export class FakeMap implements BpfMapApi {
  maxEntries: number;
  autocreate = true;
  reader: FakeReader | undefined;
  perfPageCount: number | undefined;
  constructor(readonly object: FakeObject, readonly template: MapTemplate) {
    this.maxEntries = template.maxEntries;
  }
  get name(): string {
    return this.template.name;
  }
  get typeName(): string {
    return this.template.typeName;
  }
  setMaxEntries(n: number): void {
    this.maxEntries = n;
  }
  setAutocreate(on: boolean): void {
    this.autocreate = on;
  }
  /** Shared maps: the descriptor kept of this map (keepFd), and the one it was made to reuse before load. */
  keptFd: number | undefined;
  reusedFd: number | undefined;
  reusedBeforeLoad: boolean | undefined;
  keepFd(): number {
    this.keptFd = 9000 + nextKeptFd++;
    return this.keptFd;
  }
  reuseFd(fd: number): void {
    this.reusedFd = fd;
    this.reusedBeforeLoad = !this.object.loaded;
  }
  /** Keys iterated by entryCounter steps, to check that sweeps are sliced. */
  stepped: number[] = [];
  countEntries(limit: number): number {
    return Math.min(limit, this.template.entries ?? 0);
  }
  entryCounter(limit: number): EntryCounter {
    const total = Math.min(limit, this.template.entries ?? 0);
    let count = 0;
    const stepped = this.stepped;
    return {
      get count() {
        return count;
      },
      step(maxKeys: number): boolean {
        const n = Math.min(maxKeys, total - count);
        stepped.push(n);
        count += n;
        return count >= total;
      },
    };
  }
  sumPerCpuU64(_key: number): bigint {
    return this.template.lost ?? 0n;
  }
  lookupU32Key(_key: number): Uint8Array | undefined {
    return undefined;
  }
  openReader(options: { perfPageCount?: number; mechanism?: "mmap" | "libbpf-callback" } = {}): RecordReader {
    if (this.typeName !== "ringbuf" && this.typeName !== "perf_event_array") throw new LibbpfError("openReader", 22, { subject: this.name });
    this.perfPageCount = options.perfPageCount;
    this.reader = new FakeReader(this.typeName === "ringbuf" ? "ringbuf" : "perfbuf");
    return this.reader;
  }
}

export class FakeObject implements BpfObjectApi {
  loaded = false;
  closed = false;
  /** How load() was called (quiet or not). */
  loadedQuietly: boolean | undefined;
  /** A quiet load fails with EAGAIN (and no log), as the verifier does when a signal is pending. */
  failQuiet = false;
  /** libbpf's log goes to a sink: a quiet load is a verbose one (as BpfObject does). */
  logToSink = false;
  constants: Record<string, number | bigint> = {};
  /** The .data globals as set (before load and while loaded), by name. */
  variables: Record<string, number | bigint> = {};
  /** Every setVariables call made after load, in order. */
  readonly variableUpdates: Array<Record<string, number | bigint>> = [];
  readonly #programs: FakeProgram[];
  readonly #maps: FakeMap[];
  constructor(readonly name: string, programs: ProgramTemplate[], maps: MapTemplate[], readonly constantSlots: string[]) {
    this.#programs = programs.map((p) => new FakeProgram(this, p));
    this.#maps = maps.map((m) => new FakeMap(this, m));
  }
  programs(): FakeProgram[] {
    return [...this.#programs];
  }
  maps(): FakeMap[] {
    return [...this.#maps];
  }
  program(name: string): FakeProgram | undefined {
    return this.#programs.find((p) => p.name === name);
  }
  map(name: string): FakeMap | undefined {
    return this.#maps.find((m) => m.name === name);
  }
  constantNames(): string[] {
    return [...this.constantSlots];
  }
  setConstants(values: Record<string, number | bigint>): void {
    for (const k of Object.keys(values)) if (!this.constantSlots.includes(k)) throw new LibbpfError("setConstants", 2, { subject: k });
    Object.assign(this.constants, values);
  }
  setVariables(values: Record<string, number | bigint>): void {
    Object.assign(this.variables, values);
    if (this.loaded) this.variableUpdates.push({ ...values });
  }
  load(options: { quiet?: boolean } = {}): void {
    const quiet = options.quiet === true && !this.logToSink;
    this.loadedQuietly = quiet;
    if (quiet && this.failQuiet) throw new QuietLoadError(this.name, 11);
    for (const p of this.#programs) {
      if (p.autoload && p.template.failLoad) {
        // A quiet load, like libbpf's with its log off, does not say which program failed or why.
        if (quiet) throw new QuietLoadError(this.name, p.template.failLoad.errno);
        throw new LibbpfError("bpf_object__load", p.template.failLoad.errno, { subject: p.name, verifierLog: p.template.failLoad.verifierLog });
      }
    }
    this.loaded = true;
    for (const p of this.#programs) if (p.autoload) p.loadedId = nextProgramId++;
  }
  close(): void {
    this.closed = true;
  }
  [Symbol.dispose](): void {
    this.close();
  }
}

/** A runtime whose every open gives a fresh FakeObject from the same templates; `opened` keeps them all. */
export class FakeRuntime implements BpfRuntime {
  readonly info = { source: "embedded" as const, path: "/fake/libbpf.so.1", version: "1.1" };
  readonly opened: FakeObject[] = [];
  /** Quiet loads of this many objects opened from now on fail (see FakeObject.failQuiet). */
  quietFailures = 0;
  sink: ((level: "warn" | "info" | "debug", line: string) => void) | undefined;
  constructor(
    readonly programs: ProgramTemplate[],
    readonly maps: MapTemplate[],
    readonly constantSlots: string[] = [],
    readonly ringbufSupported = true,
  ) {}
  openObject(_bytes: Uint8Array, name: string): FakeObject {
    const o = new FakeObject(name, this.programs, this.maps, this.constantSlots);
    o.logToSink = this.sink !== undefined;
    if (this.quietFailures > 0) {
      o.failQuiet = true;
      this.quietFailures--;
    }
    this.opened.push(o);
    return o;
  }
  probeMapType(typeName: string): boolean {
    return typeName !== "ringbuf" || this.ringbufSupported;
  }
  setLogSink(fn: ((level: "warn" | "info" | "debug", line: string) => void) | undefined): void {
    this.sink = fn;
  }
  /** The object that was loaded last. */
  get last(): FakeObject {
    return this.opened[this.opened.length - 1]!;
  }
}

/** CapEff with CAP_SYS_ADMIN, CAP_BPF and CAP_PERFMON. */
export const PRIVILEGED_STATUS = "Name:\tsvc-agent\nCapEff:\t000001ffffffffff\n";
export const UNPRIVILEGED_STATUS = "Name:\tsvc-agent\nCapEff:\t0000000000000000\n";
export const MOUNTS = "bpf /sys/fs/bpf bpf rw 0 0\ntracefs /sys/kernel/tracing tracefs rw 0 0\n";

export function fakeEnvironment(over: Partial<EnvironmentProbe> = {}): EnvironmentProbe & { mounted: string[]; raised: number } {
  const probe = {
    mounted: [] as string[],
    raised: 0,
    kernelRelease: () => "6.18.0",
    exists: (_p: string) => true,
    procStatus: () => PRIVILEGED_STATUS,
    mounts: () => MOUNTS,
    mount(fstype: string, target: string) {
      probe.mounted.push(`${fstype}:${target}`);
    },
    memlock: () => ({ soft: 8_388_608n as bigint | undefined, hard: 8_388_608n as bigint | undefined }),
    raiseMemlock() {
      probe.raised++;
    },
    ...over,
  };
  return probe;
}

export function fakeDeps(runtime: FakeRuntime, environment: EnvironmentProbe = fakeEnvironment()): EbpfDeps {
  return {
    openRuntime: async () => runtime,
    objectBytes: async () => new Uint8Array(8),
    environment: () => environment,
  };
}

export interface TestContext extends BaseContext {
  records: LogRecord[];
  setConfig(c: ConfigDocument): void;
}

/** A BaseContext over a YAML configuration (defaults for the rest), with a logger that keeps its records. */
export function testContext(yaml = ""): TestContext {
  let config = parseConfig(yaml, {});
  const records: LogRecord[] = [];
  const logger = new Logger({ level: "debug", sink: (line) => records.push(JSON.parse(line) as LogRecord) });
  const tasks = new TaskRegistry();
  return {
    get config() {
      return config;
    },
    setConfig(c: ConfigDocument) {
      config = c;
    },
    logger,
    status: new StatusAggregator(),
    metrics: new AgentMetrics("svc", tasks),
    tasks,
    env: {},
    records,
  };
}
