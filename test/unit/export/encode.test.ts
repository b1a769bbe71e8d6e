/** The encoder: field numbers against the embedded schema, and round trips through protobufjs decoding. */
import { describe, expect, test } from "bun:test";
import { DEFAULT_SCOPE, F, ItemEncoder, buildRequest, encodeScope, estimateProfileBytes, queuedBytes, writeAttributes, writeSpan } from "../../../src/export/encode";
import type { LogRecordItem, MetricPointItem, ProfileItem, Scope, SpanItem } from "../../../src/export/model";
import type { AttributeValue, Attributes } from "../../../src/export/types";
import { countItems } from "../../../src/export/receiver/count";
import { decodeRequest } from "../../../src/export/receiver";
import { ResourceBuilder } from "../../../src/export/resource";
import { otlpRoot } from "../../../src/export/schema";
import { ProtoWriter } from "../../../src/export/wire";

/** Which schema message each group of F describes. */
const MESSAGES: Record<keyof typeof F, string> = {
  AnyValue: "opentelemetry.proto.common.v1.AnyValue",
  ArrayValue: "opentelemetry.proto.common.v1.ArrayValue",
  KeyValue: "opentelemetry.proto.common.v1.KeyValue",
  InstrumentationScope: "opentelemetry.proto.common.v1.InstrumentationScope",
  Resource: "opentelemetry.proto.resource.v1.Resource",
  ExportTraceServiceRequest: "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest",
  ResourceSpans: "opentelemetry.proto.trace.v1.ResourceSpans",
  ScopeSpans: "opentelemetry.proto.trace.v1.ScopeSpans",
  Span: "opentelemetry.proto.trace.v1.Span",
  Event: "opentelemetry.proto.trace.v1.Span.Event",
  Link: "opentelemetry.proto.trace.v1.Span.Link",
  Status: "opentelemetry.proto.trace.v1.Status",
  ExportMetricsServiceRequest: "opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest",
  ResourceMetrics: "opentelemetry.proto.metrics.v1.ResourceMetrics",
  ScopeMetrics: "opentelemetry.proto.metrics.v1.ScopeMetrics",
  Metric: "opentelemetry.proto.metrics.v1.Metric",
  Gauge: "opentelemetry.proto.metrics.v1.Gauge",
  Sum: "opentelemetry.proto.metrics.v1.Sum",
  Histogram: "opentelemetry.proto.metrics.v1.Histogram",
  NumberDataPoint: "opentelemetry.proto.metrics.v1.NumberDataPoint",
  HistogramDataPoint: "opentelemetry.proto.metrics.v1.HistogramDataPoint",
  Exemplar: "opentelemetry.proto.metrics.v1.Exemplar",
  ExportLogsServiceRequest: "opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest",
  ResourceLogs: "opentelemetry.proto.logs.v1.ResourceLogs",
  ScopeLogs: "opentelemetry.proto.logs.v1.ScopeLogs",
  LogRecord: "opentelemetry.proto.logs.v1.LogRecord",
  ExportProfilesServiceRequest: "opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest",
  ResourceProfiles: "opentelemetry.proto.profiles.v1development.ResourceProfiles",
  ScopeProfiles: "opentelemetry.proto.profiles.v1development.ScopeProfiles",
  ProfilesDictionary: "opentelemetry.proto.profiles.v1development.ProfilesDictionary",
  Profile: "opentelemetry.proto.profiles.v1development.Profile",
  ValueType: "opentelemetry.proto.profiles.v1development.ValueType",
  Sample: "opentelemetry.proto.profiles.v1development.Sample",
  Mapping: "opentelemetry.proto.profiles.v1development.Mapping",
  Location: "opentelemetry.proto.profiles.v1development.Location",
  Line: "opentelemetry.proto.profiles.v1development.Line",
  Function: "opentelemetry.proto.profiles.v1development.Function",
  Stack: "opentelemetry.proto.profiles.v1development.Stack",
  ProfilesLink: "opentelemetry.proto.profiles.v1development.Link",
  KeyValueAndUnit: "opentelemetry.proto.profiles.v1development.KeyValueAndUnit",
};

test("every field number the encoder uses is the schema's (proto/)", () => {
  const root = otlpRoot();
  for (const [group, fields] of Object.entries(F)) {
    const type = root.lookupType(MESSAGES[group as keyof typeof F]);
    for (const [name, id] of Object.entries(fields)) {
      const field = type.fields[name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())];
      expect(field, `${group}.${name}`).toBeDefined();
      expect(field!.id, `${group}.${name}`).toBe(id);
    }
  }
});

const resource = new ResourceBuilder("unit");
const encoder = new ItemEncoder(resource.encoder);
const long = "x".repeat(300) + "é漢字";

describe("round trips through protobufjs", () => {
  test("spans: long and non-ASCII strings, negative and large integers, arrays, events, links, status", () => {
    const span: SpanItem = {
      traceId: new Uint8Array(16).fill(7),
      spanId: new Uint8Array(8).fill(9),
      name: long,
      kind: 2,
      startTimeUnixNano: 18_446_744_073_709_551_615n,
      endTimeUnixNano: 1n,
      attributes: { s: long, neg: -42, big: 2 ** 40, pi: 3.14, yes: false, list: [1, 2, 3], "ключ": "значение" },
      events: [{ timeUnixNano: 5n, name: "e" }],
      links: [{ traceId: new Uint8Array(16).fill(1), spanId: new Uint8Array(8).fill(2), traceState: "a=b" }],
      status: { code: 2, message: "bad" },
      flags: 0x301,
    };
    const body = buildRequest("traces", [encoder.encode("traces", span)], resource.encoder);
    const req = decodeRequest("traces", body) as any;
    const s = req.resourceSpans[0].scopeSpans[0].spans[0];
    expect(s.name).toBe(long);
    expect(s.traceId).toBe("07".repeat(16));
    expect(s.startTimeUnixNano).toBe("18446744073709551615");
    expect(s.kind).toBe("SPAN_KIND_SERVER");
    const attrs = Object.fromEntries(s.attributes.map((a: any) => [a.key, a.value]));
    expect(attrs.s.stringValue).toBe(long);
    expect(attrs.neg.intValue).toBe("-42");
    expect(attrs.big.intValue).toBe(String(2 ** 40));
    expect(attrs.pi.doubleValue).toBe(3.14);
    expect(attrs.yes.boolValue).toBe(false);
    expect(attrs.list.arrayValue.values.map((v: any) => v.intValue)).toEqual(["1", "2", "3"]);
    expect(attrs["ключ"].stringValue).toBe("значение");
    expect(s.events[0]).toMatchObject({ timeUnixNano: "5", name: "e" });
    expect(s.links[0]).toMatchObject({ traceState: "a=b", spanId: "02".repeat(8) });
    expect(s.status).toEqual({ message: "bad", code: "STATUS_CODE_ERROR" });
    expect(s.flags).toBe(0x301);
    expect(countItems("traces", body)).toEqual({ resources: 1, scopes: 1, items: 1 });
  });

  test("items are grouped by resource and scope objects, and metrics by metric", () => {
    const scopeA = { name: "a" };
    const workload = { "k8s.pod.name": "web-1" };
    const points: MetricPointItem[] = [
      { type: "gauge", name: "g", value: 1, timeUnixNano: 1n, scope: scopeA },
      { type: "gauge", name: "g", value: 2, timeUnixNano: 2n, scope: scopeA },
      { type: "sum", name: "c", value: 3, temporality: 1, monotonic: false, timeUnixNano: 3n, scope: scopeA },
      { type: "gauge", name: "g", value: 4, timeUnixNano: 4n, resource: workload },
    ];
    const body = buildRequest("metrics", points.map((p) => encoder.encode("metrics", p)), resource.encoder);
    const req = decodeRequest("metrics", body) as any;
    expect(req.resourceMetrics).toHaveLength(2);
    const [agentRes, podRes] = req.resourceMetrics;
    expect(agentRes.scopeMetrics[0].scope.name).toBe("a");
    expect(agentRes.scopeMetrics[0].metrics.map((m: any) => m.name)).toEqual(["g", "c"]);
    expect(agentRes.scopeMetrics[0].metrics[0].gauge.dataPoints.map((p: any) => p.asDouble)).toEqual([1, 2]);
    expect(agentRes.scopeMetrics[0].metrics[1].sum.aggregationTemporality).toBe("AGGREGATION_TEMPORALITY_DELTA");
    const podAttrs = Object.fromEntries(podRes.resource.attributes.map((a: any) => [a.key, a.value.stringValue]));
    expect(podAttrs["k8s.pod.name"]).toBe("web-1");
    // A workload's resource: the host layer and its own attributes, never the agent's service.name or SDK.
    expect(podAttrs["service.name"]).toBe("unknown_service");
    expect(podAttrs["host.name"]).toBeString();
    expect(podAttrs["telemetry.sdk.name"]).toBeUndefined();
    const agentAttrs = Object.fromEntries(agentRes.resource.attributes.map((a: any) => [a.key, a.value.stringValue]));
    expect(agentAttrs).toMatchObject({ "service.name": "unit", "telemetry.sdk.name": "svc-agent", "telemetry.sdk.language": "nodejs" });
    expect(podRes.scopeMetrics[0].scope.name).toBe("svc-agent");
    expect(countItems("metrics", body)).toEqual({ resources: 2, scopes: 2, items: 4 });
  });

  test("spans and log records of several resources and scopes, groups from a few bytes to over 16 KiB: the request as written message by message (spans: as protobufjs writes it), items in order", () => {
    const root = otlpRoot();
    const scopes: Array<Scope | undefined> = [{ name: "a" }, { name: "b", version: "1.2" }, undefined];
    const resources: Array<Attributes | undefined> = [undefined, { "k8s.pod.name": "web-1" }, { "service.name": "x".repeat(200) }];
    for (const n of [1, 3, 40, 400]) {
      const spans: SpanItem[] = [];
      const logs: LogRecordItem[] = [];
      for (let i = 0; i < n; i++) {
        const scope = scopes[i % 3];
        const res = resources[Math.floor(i / 7) % 3];
        spans.push({ traceId: new Uint8Array(16).fill(i & 255), spanId: new Uint8Array(8).fill(1), name: `s${i}`, kind: 2, startTimeUnixNano: BigInt(i + 1), endTimeUnixNano: BigInt(i + 2), attributes: { i, pad: "p".repeat(i % 50) }, ...(scope ? { scope } : {}), ...(res ? { resource: res } : {}) });
        logs.push({ observedTimeUnixNano: BigInt(i + 1), body: `line ${i}`, ...(scope ? { scope } : {}), ...(res ? { resource: res } : {}) });
      }
      for (const [signal, items] of [["traces", spans], ["logs", logs]] as const) {
        const encoded = items.map((x) => encoder.encode(signal, x));
        const body = buildRequest(signal, encoded, resource.encoder);
        /* The same request written message by message, each length fixed once its body is written. */
        const w = new ProtoWriter(1024);
        const byResource = new Map<Attributes | undefined, Map<Scope, typeof encoded>>();
        for (const e of encoded) {
          const byScope = byResource.get(e.resource) ?? byResource.set(e.resource, new Map()).get(e.resource)!;
          const scope = e.scope ?? DEFAULT_SCOPE;
          (byScope.get(scope) ?? byScope.set(scope, []).get(scope)!).push(e);
        }
        for (const [res, byScope] of byResource) {
          const top = w.open(1);
          w.bytesField(1, resource.encoder(res));
          for (const [scope, list] of byScope) {
            const sm = w.open(2);
            w.bytesField(1, encodeScope(scope));
            for (const e of list) w.bytesField(2, e.bytes);
            w.end(sm);
          }
          w.end(top);
        }
        expect(Buffer.from(body).toString("hex"), `${signal} x${n}`).toBe(Buffer.from(w.copy()).toString("hex"));
        if (signal === "traces") {
          /* Spans are written in field order: what protobufjs writes for its own decoding, byte for byte. */
          const T = root.lookupType("opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest");
          expect(Buffer.from(T.encode(T.decode(body)).finish()).toString("hex"), `${signal} x${n}`).toBe(Buffer.from(body).toString("hex"));
        }
        const req = decodeRequest(signal, body) as any;
        const groups = signal === "traces" ? req.resourceSpans : req.resourceLogs;
        const names = groups.flatMap((g: any) => (signal === "traces" ? g.scopeSpans : g.scopeLogs).flatMap((sc: any) => (signal === "traces" ? sc.spans.map((x: any) => x.name) : sc.logRecords.map((x: any) => x.body.stringValue))));
        expect(names).toHaveLength(n);
        expect(countItems(signal, body)).toMatchObject({ items: n });
      }
    }
  });

  test("log records", () => {
    const r: LogRecordItem = { observedTimeUnixNano: 9n, severityNumber: 13, severityText: "WARN", body: long, attributes: { n: 1 } };
    const req = decodeRequest("logs", buildRequest("logs", [encoder.encode("logs", r)], resource.encoder)) as any;
    expect(req.resourceLogs[0].scopeLogs[0].logRecords[0]).toMatchObject({
      observedTimeUnixNano: "9",
      severityNumber: "SEVERITY_NUMBER_WARN",
      severityText: "WARN",
      body: { stringValue: long },
    });
  });

  test("profiles: a shared dictionary with zero entries first, samples pointing at the stack table, the time set", () => {
    const p: ProfileItem = {
      sampleType: { type: "samples", unit: "count" },
      periodType: { type: "cpu", unit: "nanoseconds" },
      period: 10_000_000,
      timeUnixNano: 100n,
      durationNanos: 1_000_000_000n,
      samples: [
        { stack: [{ function: "leaf", file: "a.c", line: 10 }, { function: "main", file: "a.c", binary: "/bin/app", buildId: "ab12" }], value: 3, attributes: { "thread.name": "w1" } },
        { stack: [{ function: "main", file: "a.c", binary: "/bin/app", buildId: "ab12" }], value: 1 },
      ],
    };
    const req = decodeRequest("profiles", buildRequest("profiles", [encoder.encode("profiles", p)], resource.encoder)) as any;
    const d = req.dictionary;
    expect(d.stringTable[0]).toBe("");
    expect(d.mappingTable).toHaveLength(2);
    // The binary's mapping: its file name, and its build id as an attribute.
    expect(d.stringTable[d.mappingTable[1].filenameStrindex]).toBe("/bin/app");
    const buildId = d.attributeTable[d.mappingTable[1].attributeIndices[0]];
    expect([d.stringTable[buildId.keyStrindex], buildId.value]).toEqual(["process.executable.build_id.gnu", { stringValue: "ab12" }]);
    expect(d.locationTable[d.stackTable[1].locationIndices[1]].mappingIndex).toBe(1);
    // Index 0 of every table is present and the zero value.
    expect(d.mappingTable[0]).toEqual({});
    expect(d.locationTable[0]).toEqual({});
    expect(d.functionTable[0]).toEqual({});
    expect(d.attributeTable[0]).toEqual({});
    expect(d.stackTable[0]).toEqual({});
    expect(d.linkTable).toHaveLength(1);
    const prof = req.resourceProfiles[0].scopeProfiles[0].profiles[0];
    expect(prof.timeUnixNano).toBe("100");
    expect(prof.durationNano).toBe("1000000000");
    expect(prof.period).toBe("10000000");
    const fnName = (loc: number) => d.stringTable[d.functionTable[d.locationTable[loc].lines[0].functionIndex].nameStrindex];
    const stack = (s: any) => d.stackTable[s.stackIndex].locationIndices.map(fnName);
    expect(stack(prof.samples[0])).toEqual(["leaf", "main"]);
    expect(stack(prof.samples[1])).toEqual(["main"]);
    expect(prof.samples.map((s: any) => s.values)).toEqual([["3"], ["1"]]);
    expect(d.stringTable[prof.sampleType.typeStrindex]).toBe("samples");
    expect(d.stringTable[prof.periodType.unitStrindex]).toBe("nanoseconds");
    const attr = d.attributeTable[prof.samples[0].attributeIndices[0]];
    expect(d.stringTable[attr.keyStrindex]).toBe("thread.name");
    expect(attr.value).toEqual({ stringValue: "w1" });
    expect(prof.samples[1].attributeIndices).toBeUndefined();
  });

  test("profiles: samples of equal stack and attributes are combined, their values summed", () => {
    const t1 = { "thread.name": "a" };
    const t2 = { "thread.name": "b" };
    const frame = (name: string) => ({ function: name, binary: "/bin/app" });
    const p: ProfileItem = {
      sampleType: { type: "samples", unit: "count" },
      timeUnixNano: 1n,
      durationNanos: 2n,
      samples: [
        { stack: [frame("f"), frame("main")], value: 2, attributes: t1 },
        { stack: [frame("f"), frame("main")], value: 5, attributes: t1 },
        { stack: [frame("f"), frame("main")], value: 7, attributes: t2 },
        { stack: [frame("g"), frame("main")], value: 1, attributes: t1 },
      ],
    };
    const req = decodeRequest("profiles", buildRequest("profiles", [encoder.encode("profiles", p)], resource.encoder)) as any;
    const prof = req.resourceProfiles[0].scopeProfiles[0].profiles[0];
    expect(req.dictionary.stackTable).toHaveLength(3);
    expect(prof.samples.map((s: any) => [s.stackIndex, s.attributeIndices, s.values])).toEqual([
      [1, [1], ["7"]],
      [1, [2], ["7"]],
      [2, [1], ["1"]],
    ]);
  });

  test("profiles: many stacks, each once in the stack table, every sample naming its own frames", () => {
    const frames = Array.from({ length: 50 }, (_, i) => ({ function: `f${i}`, binary: "/bin/app", address: BigInt(i + 1) }));
    let seed = 7;
    const rnd = (n: number) => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n;
    const stacks = Array.from({ length: 3000 }, () => Array.from({ length: 1 + rnd(6) }, () => frames[rnd(50)]!));
    const p: ProfileItem = {
      sampleType: { type: "samples", unit: "count" },
      timeUnixNano: 1n,
      durationNanos: 2n,
      samples: stacks.map((stack) => ({ stack, value: 1 })),
    };
    const req = decodeRequest("profiles", buildRequest("profiles", [encoder.encode("profiles", p)], resource.encoder)) as any;
    const d = req.dictionary;
    const names = (s: any) => (d.stackTable[s.stackIndex].locationIndices ?? []).map((l: number) => d.stringTable[d.functionTable[d.locationTable[l].lines[0].functionIndex].nameStrindex]);
    const distinct = new Set(stacks.map((st) => st.map((f) => f.function).join(",")));
    expect(d.stackTable).toHaveLength(distinct.size + 1);
    expect(new Set(d.stackTable.map((s: any) => (s.locationIndices ?? []).join(","))).size).toBe(distinct.size + 1);
    const prof = req.resourceProfiles[0].scopeProfiles[0].profiles[0];
    expect(prof.samples).toHaveLength(distinct.size);
    const weight = new Map<string, number>();
    for (const st of stacks) weight.set(st.map((f) => f.function).join(","), (weight.get(st.map((f) => f.function).join(",")) ?? 0) + 1);
    for (const s of prof.samples) expect(Number(s.values[0])).toBe(weight.get(names(s).join(","))!);
  });

  test("profiles: encoded once, when the batch is built (nothing at submit but an estimate); the resource as it is at send time", () => {
    const own = new ResourceBuilder("unit");
    const enc = new ItemEncoder(own.encoder);
    const leaf = { function: "leaf", binary: "/bin/app", address: 0x10n };
    const thread = { "thread.name": "w" };
    const p: ProfileItem = {
      sampleType: { type: "samples", unit: "count" },
      timeUnixNano: 1n,
      durationNanos: 2n,
      samples: [
        { stack: [leaf, { function: "main", binary: "/bin/app", address: 0x20n }], value: 2, attributes: thread },
        // Same frame object and an equal frame in another object: one location either way.
        { stack: [leaf, { function: "leaf", binary: "/bin/app", address: 0x10n }], value: 1, attributes: thread },
      ],
    };
    const entry = enc.encode("profiles", p);
    expect(entry.bytes.length).toBe(0);
    expect(entry.size).toBe(estimateProfileBytes(p));
    expect(queuedBytes(entry)).toBeGreaterThan(0);
    const one = buildRequest("profiles", [entry], own.encoder);
    const req = decodeRequest("profiles", one) as any;
    expect(req.dictionary.locationTable).toHaveLength(3);
    expect(req.dictionary.attributeTable).toHaveLength(2);
    const prof = req.resourceProfiles[0].scopeProfiles[0].profiles[0];
    expect(req.dictionary.stackTable.map((s: any) => s.locationIndices)).toEqual([undefined, [1, 2], [1, 1]]);
    expect(prof.samples.map((s: any) => [s.stackIndex, s.attributeIndices])).toEqual([[1, [1]], [2, [1]]]);
    // The estimate is of the order of the encoding (queue limits), not an exact size.
    expect(entry.size!).toBeGreaterThan(one.length / 4);
    expect(entry.size!).toBeLessThan(one.length * 4);
    // Two profiles share one dictionary.
    const two = decodeRequest("profiles", buildRequest("profiles", [entry, enc.encode("profiles", p)], own.encoder)) as any;
    expect(two.dictionary.locationTable).toHaveLength(3);
    expect(two.resourceProfiles[0].scopeProfiles[0].profiles).toHaveLength(2);
    // A changed resource (e.g. discovery) is the one sent.
    own.set("test", { "host.id": "h1" });
    const again = buildRequest("profiles", [entry], own.encoder);
    const attrs = (decodeRequest("profiles", again) as any).resourceProfiles[0].resource.attributes.map((a: any) => a.key);
    expect(attrs).toContain("host.id");
    // What the request could not encode is refused at submit, not when the batch is sent.
    expect(() => enc.encode("profiles", { ...p, timeUnixNano: 1 as unknown as bigint })).toThrow();
    expect(() => enc.encode("profiles", { ...p, samples: [{ stack: [{ function: 5 as unknown as string }], value: 1 }] })).toThrow();
  });
});

test("ProtoWriter: nested lengths of 127, 128 and 20000 bytes", () => {
  for (const n of [127, 128, 16383, 16384, 20000]) {
    const w = new ProtoWriter(16);
    const m = w.open(1);
    w.raw(new Uint8Array(n).fill(0x61));
    w.end(m);
    const out = w.copy();
    const type = otlpRoot().lookupType("opentelemetry.proto.common.v1.KeyValue");
    expect((type.decode(out) as any).key).toBe("a".repeat(n));
  }
});

test("items written straight into the arenas: small and oversized items interleaved stay intact, each its own encoding", () => {
  const resource = new ResourceBuilder("arena-test");
  const encoder = new ItemEncoder(resource.encoder);
  const span = (i: number): SpanItem => ({
    traceId: new Uint8Array(16).fill(i & 0xff),
    spanId: new Uint8Array(8).fill((i * 7) & 0xff),
    name: `op ${i}`,
    kind: 1,
    startTimeUnixNano: BigInt(i),
    endTimeUnixNano: BigInt(i + 1),
    // Every 97th span carries 40 to 300 KB (more than an arena's free space, or than a whole arena).
    attributes: i % 97 === 0 ? { blob: "x".repeat(40_000 + (i % 5) * 65_000) } : { i },
  });
  const n = 3000;
  const encoded = Array.from({ length: n }, (_, i) => encoder.encode("traces", span(i)));
  const Span = otlpRoot().lookupType("opentelemetry.proto.trace.v1.Span");
  for (let i = 0; i < n; i++) {
    const fresh = new ProtoWriter(64);
    writeSpan(fresh, span(i));
    expect(encoded[i]!.bytes).toEqual(fresh.copy());
    expect((Span.decode(encoded[i]!.bytes) as any).name).toBe(`op ${i}`);
  }
  const request = decodeRequest("traces", buildRequest("traces", encoded, resource.encoder)) as any;
  expect(request.resourceSpans).toHaveLength(1);
  expect(request.resourceSpans[0].scopeSpans[0].spans.map((s: any) => s.name)).toEqual(Array.from({ length: n }, (_, i) => `op ${i}`));
});

test("attributes: drawn sets encode as protobufjs encodes them (short strings and small integers written in one go with the key copied by words, the rest as nested messages)", () => {
  const KeyValueList = otlpRoot().lookupType("opentelemetry.proto.common.v1.KeyValueList");
  let seed = 0xa77;
  const rnd = (n: number) => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 8) % n;
  const pick = <T>(xs: readonly T[]): T => xs[rnd(xs.length)]!;
  const ints = [0, 1, 127, 128, 16_383, 16_384, 2 ** 21 - 1, 2 ** 21, 2 ** 28 - 1, 2 ** 28, 2 ** 31, 2 ** 53 - 1, -1, -(2 ** 31)];
  const value = (): AttributeValue => {
    switch (rnd(6)) {
      case 0:
        return "v".repeat(rnd(140));
      case 1:
        return pick(["é", "ü-x", "日本", "a\u0080b"]).repeat(1 + rnd(30));
      case 2:
        return pick(ints);
      case 3:
        return pick([0.5, -2.25, 1e300, 2 ** 53 + 2]);
      case 4:
        return rnd(2) === 0;
      default:
        return pick([["a", "b"], [1, 2 ** 40], []]);
    }
  };
  const anyValue = (v: AttributeValue): object =>
    typeof v === "string" ? { stringValue: v } : typeof v === "boolean" ? { boolValue: v } : Array.isArray(v) ? { arrayValue: { values: v.map((e) => anyValue(e)) } } : Number.isSafeInteger(v) ? { intValue: v } : { doubleValue: v };
  for (let i = 0; i < 5000; i++) {
    const attributes: Attributes = {};
    for (let n = rnd(8); n > 0; n--) attributes[`${pick(["k", "é", "日本"])}${rnd(1000)}${"x".repeat(pick([0, 1, 2, 3, 5, 40, 120]))}`] = value();
    const w = new ProtoWriter(64);
    writeAttributes(w, 1, attributes);
    const expected = KeyValueList.encode(KeyValueList.fromObject({ values: Object.entries(attributes).map(([key, v]) => ({ key, value: anyValue(v) })) })).finish();
    expect(Buffer.from(w.copy()).toString("hex")).toBe(Buffer.from(expected).toString("hex"));
  }
});
