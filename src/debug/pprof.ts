/**
 * Builds profile.proto (github.com/google/pprof/proto/profile.proto) with the pprof-format encoder and gzips it,
 * as `go tool pprof` and every pprof viewer expect. Functions and locations are deduplicated by name/file/line.
 */
import { gzipSync } from "node:zlib";
import { Function as PprofFunction, Label, Line, Location, Profile, Sample, StringTable, ValueType } from "pprof-format";

/** One frame of a sample's stack. */
export interface Frame {
  /** Function name as shown by pprof. */
  name: string;
  file?: string;
  /** 1-based line of the frame (0 when unknown). */
  line?: number;
  /** 1-based line where the function starts (0 when unknown). */
  startLine?: number;
}

export type SampleLabels = Record<string, string | number>;

export interface ProfileShape {
  /** Sample value types in order, e.g. [["samples", "count"], ["cpu", "nanoseconds"]]. */
  sampleTypes: Array<[type: string, unit: string]>;
  periodType?: [type: string, unit: string];
  period?: number;
  /** Sample type pprof shows by default (its type name). */
  defaultSampleType?: string;
  timeNanos?: bigint;
  durationNanos?: bigint;
}

export class PprofBuilder {
  readonly #strings = new StringTable();
  readonly #functions = new Map<string, PprofFunction>();
  readonly #locations = new Map<string, Location>();
  readonly #samples: Sample[] = [];
  readonly #comments: string[] = [];

  constructor(readonly shape: ProfileShape) {}

  /** Adds a sample; `stack` is leaf first, `values` one per sample type. */
  add(stack: readonly Frame[], values: readonly number[], labels: SampleLabels = {}): void {
    if (values.length !== this.shape.sampleTypes.length) throw new Error(`expected ${this.shape.sampleTypes.length} values, got ${values.length}`);
    const label = Object.entries(labels).map(([k, v]) =>
      typeof v === "number" ? new Label({ key: this.#str(k), num: Math.round(v) }) : new Label({ key: this.#str(k), str: this.#str(v) }),
    );
    this.#samples.push(new Sample({ locationId: stack.map((f) => this.#location(f).id), value: values.map((v) => Math.round(v)), label }));
  }

  /** Adds a free-text comment (`go tool pprof -comments` shows them). */
  comment(text: string): void {
    this.#comments.push(text);
  }

  get sampleCount(): number {
    return this.#samples.length;
  }

  /** The profile as gzipped profile.proto bytes. */
  encode(): Uint8Array {
    const s = this.shape;
    const profile = new Profile({
      sampleType: s.sampleTypes.map(([type, unit]) => new ValueType({ type: this.#str(type), unit: this.#str(unit) })),
      periodType: s.periodType ? new ValueType({ type: this.#str(s.periodType[0]), unit: this.#str(s.periodType[1]) }) : undefined,
      period: s.period ?? 0,
      sample: this.#samples,
      function: [...this.#functions.values()],
      location: [...this.#locations.values()],
      timeNanos: s.timeNanos ?? BigInt(Date.now()) * 1_000_000n,
      durationNanos: s.durationNanos ?? 0,
      comment: this.#comments.map((c) => this.#str(c)),
      defaultSampleType: s.defaultSampleType ? this.#str(s.defaultSampleType) : 0,
      stringTable: this.#strings,
    });
    return gzipSync(profile.encode());
  }

  #str(s: string): number {
    return this.#strings.dedup(s);
  }

  #location(f: Frame): Location {
    const fn = this.#function(f);
    const key = `${fn.id}:${f.line ?? 0}`;
    let loc = this.#locations.get(key);
    if (!loc) {
      loc = new Location({ id: this.#locations.size + 1, line: [new Line({ functionId: fn.id, line: f.line ?? 0 })] });
      this.#locations.set(key, loc);
    }
    return loc;
  }

  #function(f: Frame): PprofFunction {
    const key = `${f.name}\u0000${f.file ?? ""}\u0000${f.startLine ?? 0}`;
    let fn = this.#functions.get(key);
    if (!fn) {
      fn = new PprofFunction({
        id: this.#functions.size + 1,
        name: this.#str(f.name),
        systemName: this.#str(f.name),
        filename: this.#str(f.file ?? ""),
        startLine: f.startLine ?? 0,
      });
      this.#functions.set(key, fn);
    }
    return fn;
  }
}

/** Parses a JavaScript stack text (`    at fn (file:line:col)` lines) into frames, leaf first. */
export function parseStack(text: string | undefined): Frame[] {
  if (!text) return [];
  const frames: Frame[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line.startsWith("at ")) continue;
    const body = line.slice(3);
    const m = /^(.*?) \((.*):(\d+):(\d+)\)$/.exec(body) ?? /^()(.*):(\d+):(\d+)$/.exec(body);
    if (m) frames.push({ name: !m[1] || m[1] === "<anonymous>" ? "(anonymous)" : m[1], file: m[2], line: Number(m[3]), startLine: 0 });
    else frames.push({ name: body });
  }
  return frames;
}
