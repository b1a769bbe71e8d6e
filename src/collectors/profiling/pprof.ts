/** Profiles in pprof's profile.proto (gzipped), for operators and `go tool pprof`, built from the same items as OTLP. */
import { gzipSync } from "node:zlib";
import { Function as PprofFunction, Label, Line, Location, Mapping, Profile, Sample, StringTable, ValueType } from "pprof-format";
import type { ProfileItem } from "../../export/model";

/**
 * One pprof profile from the profiles of one period (one per process): sample types `samples/count` and
 * `cpu/nanoseconds`, each sample labelled with `pid`, `comm` (from the item's resource) and `thread`.
 */
export function encodePprof(items: readonly ProfileItem[]): Uint8Array {
  const strings = new StringTable();
  const s = (text: string) => strings.dedup(text);
  const mappings = new Map<string, Mapping>();
  const functions = new Map<string, PprofFunction>();
  const locations = new Map<string, Location>();
  const samples: Sample[] = [];
  const period = items[0]?.period ?? 0;
  let start = items[0]?.timeUnixNano ?? 0n;
  let duration = 0n;
  for (const item of items) {
    if (item.timeUnixNano < start) start = item.timeUnixNano;
    if (item.durationNanos > duration) duration = item.durationNanos;
    const pid = item.resource?.["process.pid"];
    const comm = item.resource?.["process.executable.name"];
    for (const sample of item.samples) {
      const ids: number[] = [];
      for (const f of sample.stack) {
        const binary = f.binary ?? "";
        let mapping = mappings.get(binary);
        if (!mapping) {
          mapping = new Mapping({ id: mappings.size + 1, filename: s(binary), buildId: s(f.buildId ?? ""), hasFunctions: true });
          mappings.set(binary, mapping);
        }
        const fkey = `${binary}\0${f.function}`;
        let fn = functions.get(fkey);
        if (!fn) {
          fn = new PprofFunction({ id: functions.size + 1, name: s(f.function), systemName: s(f.function), filename: s(f.file ?? binary) });
          functions.set(fkey, fn);
        }
        const lkey = `${fkey}\0${f.address ?? ""}`;
        let loc = locations.get(lkey);
        if (!loc) {
          loc = new Location({ id: locations.size + 1, mappingId: mapping.id, address: f.address ?? 0, line: [new Line({ functionId: fn.id, line: f.line ?? 0 })] });
          locations.set(lkey, loc);
        }
        ids.push(Number(loc.id));
      }
      const label: Label[] = [];
      if (typeof pid === "number") label.push(new Label({ key: s("pid"), num: pid }));
      if (typeof comm === "string") label.push(new Label({ key: s("comm"), str: s(comm) }));
      const thread = sample.attributes?.["thread.name"];
      if (typeof thread === "string") label.push(new Label({ key: s("thread"), str: s(thread) }));
      samples.push(new Sample({ locationId: ids, value: [sample.value, sample.value * (period || 0)], label }));
    }
  }
  const profile = new Profile({
    sampleType: [new ValueType({ type: s("samples"), unit: s("count") }), new ValueType({ type: s("cpu"), unit: s("nanoseconds") })],
    sample: samples,
    mapping: [...mappings.values()],
    location: [...locations.values()],
    function: [...functions.values()],
    stringTable: strings,
    timeNanos: start,
    durationNanos: duration,
    periodType: new ValueType({ type: s("cpu"), unit: s("nanoseconds") }),
    period,
  });
  return gzipSync(profile.encode());
}
