/**
 * Heap profile: the live JavaScript heap by object type, from a JavaScriptCore heap snapshot (bun:jsc
 * generateHeapSnapshotForDebugging). JavaScriptCore records no allocation sites, so each sample's stack is the
 * object type (and, for functions and classes, the snapshot's label, i.e. their name). Sample types are Go's
 * inuse_objects/count and inuse_space/bytes; memory outside the GC heap (buffers, strings' backing stores)
 * is one sample of its own.
 */
import * as jsc from "bun:jsc";
import { PprofBuilder, type Frame } from "./pprof";

/** Values per node in the GCDebugging snapshot: id, size, class index, flags, label index, cell address, wrapped address. */
const NODE_FIELDS = 7;
/** Class names whose snapshot label (their name) is worth a frame of its own. */
const LABELLED_CLASSES = new Set(["Function", "Structure", "FunctionExecutable", "FunctionCodeBlock"]);
/** At most this many distinct labels per class; the rest fold into "(other)". */
const MAX_LABELS_PER_CLASS = 200;

interface GcSnapshot {
  nodes: Array<number | string>;
  nodeClassNames: string[];
  labels: string[];
}

export interface HeapByType {
  /** `${class}\u0000${label}` -> objects and bytes. */
  groups: Map<string, { objects: number; bytes: number }>;
  extraBytes: number;
  objects: number;
  bytes: number;
}

/** Takes a snapshot (after a full collection when `gc`) and groups live objects by type. */
export function heapByType(gc: boolean): HeapByType {
  if (gc) Bun.gc(true);
  // Present in bun:jsc under Bun 1.4 though missing from its type declarations.
  const snap = (jsc as unknown as { generateHeapSnapshotForDebugging(): GcSnapshot }).generateHeapSnapshotForDebugging();
  const groups = new Map<string, { objects: number; bytes: number }>();
  const labelsPerClass = new Map<string, Set<string>>();
  let objects = 0;
  let bytes = 0;
  for (let i = NODE_FIELDS; i + NODE_FIELDS <= snap.nodes.length; i += NODE_FIELDS) {
    const size = Number(snap.nodes[i + 1]);
    const cls = snap.nodeClassNames[Number(snap.nodes[i + 2])] ?? "(unknown)";
    let label = "";
    if (LABELLED_CLASSES.has(cls)) {
      label = snap.labels[Number(snap.nodes[i + 4])] ?? "";
      const seen = labelsPerClass.get(cls) ?? new Set<string>();
      labelsPerClass.set(cls, seen);
      if (label && !seen.has(label)) {
        if (seen.size >= MAX_LABELS_PER_CLASS) label = "(other)";
        else seen.add(label);
      }
    }
    const key = `${cls}\u0000${label}`;
    const g = groups.get(key) ?? { objects: 0, bytes: 0 };
    g.objects++;
    g.bytes += size;
    groups.set(key, g);
    objects++;
    bytes += size;
  }
  return { groups, extraBytes: jsc.heapStats().extraMemorySize, objects, bytes };
}

/**
 * The heap profile. By default it is cheap (~0.1 s): object counts by type from heapStats(), with the heap's
 * total size as one sample of its own, since sizes per type exist only in a snapshot. With `snapshot` it walks a
 * heap snapshot for counts and sizes per type; that blocks the event loop for seconds on a large heap.
 */
export function heapProfile(gc: boolean, snapshot: boolean): PprofBuilder {
  const started = Date.now();
  if (gc) Bun.gc(true);
  const builder = new PprofBuilder({
    sampleTypes: [
      ["inuse_objects", "count"],
      ["inuse_space", "bytes"],
    ],
    defaultSampleType: snapshot ? "inuse_space" : "inuse_objects",
    timeNanos: BigInt(started) * 1_000_000n,
  });
  if (!snapshot) {
    const stats = jsc.heapStats();
    for (const [type, count] of Object.entries(stats.objectTypeCounts)) builder.add([{ name: type }], [count, 0], { type });
    builder.add([{ name: "(JavaScript heap, all types: sizes per type need ?snapshot=1)" }], [0, stats.heapSize]);
    if (stats.extraMemorySize > 0) builder.add([{ name: "(memory outside the GC heap: buffers, external strings)" }], [0, stats.extraMemorySize]);
    builder.comment(
      `JavaScriptCore heapStats()${gc ? " after a full collection" : ""}: ${stats.objectCount} objects by type, heap ${stats.heapSize} bytes; sizes per type and function names need /debug/pprof/heap?snapshot=1 (slow: blocks the agent for seconds)`,
    );
    return builder;
  }
  const h = heapByType(false);
  for (const [key, g] of h.groups) {
    const [cls, label] = key.split("\u0000") as [string, string];
    const stack: Frame[] = label ? [{ name: `${cls} ${label}` }, { name: cls }] : [{ name: cls }];
    builder.add(stack, [g.objects, g.bytes], { type: cls });
  }
  if (h.extraBytes > 0) builder.add([{ name: "(memory outside the GC heap: buffers, external strings)" }], [0, h.extraBytes]);
  builder.comment(`JavaScriptCore heap snapshot${gc ? " after a full collection" : ""}: ${h.objects} objects, ${h.bytes} bytes; grouped by object type (no allocation sites are recorded by the runtime)`);
  return builder;
}
