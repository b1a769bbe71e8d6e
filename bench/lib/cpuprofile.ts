/**
 * Summarises a .cpuprofile (Chrome DevTools format, written by `bun --cpu-prof --cpu-prof-dir=DIR`): self time
 * by function and by file (node_modules packages grouped), to find where a missed target's time goes.
 * Usage: bun bench/lib/cpuprofile.ts FILE.cpuprofile [--top N]
 */
import { readFileSync } from "node:fs";
import { argNumber } from "./args";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileSummary {
  totalMs: number;
  byFunction: Array<{ name: string; ms: number }>;
  byFile: Array<{ name: string; ms: number }>;
}

/** Groups a URL: node_modules/<pkg> for dependencies, the path below the repository for our files. */
function fileGroup(url: string): string {
  if (!url) return "(native/runtime)";
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm) return `node_modules/${nm[1]}`;
  const src = /\/((?:src|ffi|bench|test)\/.*)$/.exec(url);
  return src ? src[1]! : url;
}

export function summarise(profile: CpuProfile): ProfileSummary {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<number, number>();
  profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
  const fn = new Map<string, number>();
  const file = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const n = byId.get(id)!;
    const f = fileGroup(n.callFrame.url);
    const name = `${n.callFrame.functionName || "(anonymous)"} ${f}${n.callFrame.url ? `:${n.callFrame.lineNumber + 1}` : ""}`;
    fn.set(name, (fn.get(name) ?? 0) + us);
    file.set(f, (file.get(f) ?? 0) + us);
  }
  const sorted = (m: Map<string, number>) => [...m].map(([name, us]) => ({ name, ms: us / 1000 })).sort((a, b) => b.ms - a.ms);
  return { totalMs: (profile.endTime - profile.startTime) / 1000, byFunction: sorted(fn), byFile: sorted(file) };
}

if (import.meta.main) {
  const path = process.argv[2];
  if (!path) throw new Error("usage: bun bench/lib/cpuprofile.ts FILE.cpuprofile [--top N]");
  const top = argNumber("top", 15);
  const s = summarise(JSON.parse(readFileSync(path, "utf8")) as CpuProfile);
  console.log(`profile ${s.totalMs.toFixed(0)} ms`);
  console.log("self time by file:");
  for (const r of s.byFile.slice(0, top)) console.log(`  ${r.ms.toFixed(1).padStart(9)} ms  ${r.name}`);
  console.log("self time by function:");
  for (const r of s.byFunction.slice(0, top)) console.log(`  ${r.ms.toFixed(1).padStart(9)} ms  ${r.name}`);
}
